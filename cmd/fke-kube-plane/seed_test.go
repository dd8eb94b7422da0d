package main

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestSeedable(t *testing.T) {
	bootstrap := map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}
	apf := map[string]string{"apf.kubernetes.io/autoupdate-spec": "true"}
	for _, tc := range []struct {
		resource    string
		name        string
		labels      map[string]string
		annotations map[string]string
		want        bool
	}{
		{"clusterroles", "admin", bootstrap, nil, true},
		{"clusterroles", "system:metrics-server", map[string]string{"app.kubernetes.io/managed-by": "fke"}, nil, false},
		{"rolebindings", "system::leader-locking-kube-scheduler", bootstrap, nil, true},
		{"roles", "a-users-role", nil, nil, false},
		{"priorityclasses", "system-node-critical", nil, nil, true},
		{"priorityclasses", "high", nil, nil, false},
		{"flowschemas", "exempt", nil, apf, true},
		{"prioritylevelconfigurations", "mine", nil, nil, false},
	} {
		obj := &metav1.ObjectMeta{Name: tc.name, Labels: tc.labels, Annotations: tc.annotations}
		if got := seedable(tc.resource, obj); got != tc.want {
			t.Errorf("seedable(%s %s) = %v, want %v", tc.resource, tc.name, got, tc.want)
		}
	}
}

func TestSeedKey(t *testing.T) {
	for key, want := range map[string]bool{
		"/registry/clusterroles/admin":                         true,
		"/registry/rolebindings/kube-system/system::x":         true,
		"/registry/priorityclasses/system-node-critical":       true,
		"/registry/secrets/kube-system/a":                      false,
		"/registry/clusterrolesx/a":                            false,
		"/other/clusterroles/admin":                            false,
		"/registry/prioritylevelconfigurations/global-default": true,
	} {
		if got := seedKey("/registry", key); got != want {
			t.Errorf("seedKey(%q) = %v, want %v", key, got, want)
		}
	}
}

// stored encodes obj as the API server stores it.
func stored(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	b, err := encodeStored(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func clusterRole(name string, labels map[string]string) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid-of-the-template", Labels: labels},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}},
	}
}

func TestRenewIdentity(t *testing.T) {
	now := time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)
	out, err := renewIdentity(stored(t, clusterRole("admin", nil)), now)
	if err != nil {
		t.Fatal(err)
	}
	obj, m, err := decodeStored(out)
	if err != nil {
		t.Fatal(err)
	}
	cr, ok := obj.(*rbacv1.ClusterRole)
	if !ok {
		t.Fatalf("decoded %T, want a ClusterRole", obj)
	}
	if m.GetUID() == "" || m.GetUID() == "uid-of-the-template" {
		t.Errorf("UID %q: want a new one", m.GetUID())
	}
	if !m.GetCreationTimestamp().Time.Equal(now) {
		t.Errorf("created %v, want %v", m.GetCreationTimestamp(), now)
	}
	if cr.Name != "admin" || len(cr.Rules) != 1 || cr.Rules[0].Resources[0] != "pods" {
		t.Errorf("the object changed beyond its identity: %+v", cr)
	}
	if _, err := renewIdentity([]byte("not stored"), now); err == nil {
		t.Error("renewIdentity of garbage: no error")
	}
}

// startEtcd starts an embedded etcd on free loopback ports and returns a
// client of it.
func testEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	free := func() url.URL {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return url.URL{Scheme: "http", Host: l.Addr().String()}
	}
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	client, peer := free(), free()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready after 30 s")
	}
	cli := v3client.New(e.Server)
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestSeedSaveAndPlant: a seed saved from one datastore holds upstream's
// defaults only; planted into an empty one it writes them with new
// identities, and never over a key that exists.
func TestSeedSaveAndPlant(t *testing.T) {
	ctx := context.Background()
	bootstrap := map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}
	first := testEtcd(t)
	put := func(cli *clientv3.Client, key string, obj runtime.Object) {
		t.Helper()
		if _, err := cli.Put(ctx, key, string(stored(t, obj))); err != nil {
			t.Fatal(err)
		}
	}
	put(first, "/registry/clusterroles/admin", clusterRole("admin", bootstrap))
	put(first, "/registry/clusterroles/a-users-role", clusterRole("a-users-role", nil))
	aggregated := clusterRole("edit", bootstrap)
	aggregated.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-edit": "true"}}}}
	put(first, "/registry/clusterroles/edit", aggregated)
	put(first, "/registry/priorityclasses/system-node-critical", &schedulingv1.PriorityClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: "scheduling.k8s.io/v1", Kind: "PriorityClass"},
		ObjectMeta: metav1.ObjectMeta{Name: "system-node-critical"}, Value: 2000001000,
	})
	path := filepath.Join(t.TempDir(), ".seeds", "plane.json")
	n, err := saveSeed(ctx, first, "/registry", path, "v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("saved %d objects, want 3 (the user's role is not a default)", n)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("seed file: %v, %v (want mode 0600)", st, err)
	}
	if _, err := readSeed(path, "v1.36.3"); err == nil {
		t.Error("a seed of another version was read without an error")
	}
	if s, err := readSeed(filepath.Join(t.TempDir(), "none.json"), "v1.37.2"); s != nil || err != nil {
		t.Errorf("no seed file: got %v, %v; want nil, nil", s, err)
	}
	seed, err := readSeed(path, "v1.37.2")
	if err != nil {
		t.Fatal(err)
	}

	second := testEtcd(t)
	if empty, err := datastoreEmpty(ctx, second, "/registry"); err != nil || !empty {
		t.Fatalf("a new datastore: empty = %v, %v", empty, err)
	}
	put(second, "/registry/priorityclasses/system-node-critical", &schedulingv1.PriorityClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: "scheduling.k8s.io/v1", Kind: "PriorityClass"},
		ObjectMeta: metav1.ObjectMeta{Name: "system-node-critical", UID: "already-there"}, Value: 2000001000,
	})
	if n, err := plantSeed(ctx, second, "/registry", seed); err != nil || n != 2 {
		t.Fatalf("plantSeed = %d, %v; want 2 written (the priority class exists)", n, err)
	}
	resp, err := second.Get(ctx, "/registry/clusterroles/edit")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the planted aggregated role: %v, %v", resp, err)
	}
	if obj, _, err := decodeStored(resp.Kvs[0].Value); err != nil || len(obj.(*rbacv1.ClusterRole).Rules) != 0 {
		t.Errorf("the aggregated role was planted with the first cluster's rules (%v): want none, for the controller manager to compute", err)
	}
	resp, err = second.Get(ctx, "/registry/clusterroles/admin")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the planted role: %v, %v", resp, err)
	}
	_, m, err := decodeStored(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetUID() == "" || m.GetUID() == "uid-of-the-template" {
		t.Errorf("planted role's UID %q: want a new one", m.GetUID())
	}
	resp, err = second.Get(ctx, "/registry/priorityclasses/system-node-critical")
	if err != nil {
		t.Fatal(err)
	}
	if _, m, err := decodeStored(resp.Kvs[0].Value); err != nil || m.GetUID() != "already-there" {
		t.Errorf("an existing object was overwritten: UID %q, %v", m.GetUID(), err)
	}
	if n, err := plantSeed(ctx, second, "/registry", seed); err != nil || n != 0 {
		t.Errorf("planting again = %d, %v; want 0 written", n, err)
	}
	bad := &seedFile{Version: "v1.37.2", Objects: []seedKV{{Key: "/registry/secrets/kube-system/x", Value: seed.Objects[0].Value}}}
	if _, err := plantSeed(ctx, second, "/registry", bad); err == nil {
		t.Error("a seed key outside the seed's resources was planted")
	}
}
