package kwok

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"fke.dev/fke/internal/nodeprovider"
)

func lease(name string, holder *string, renew time.Time) *coordinationv1.Lease {
	d := int32(nodeLeaseDurationSeconds)
	rt := metav1.NewMicroTime(renew)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: holder, LeaseDurationSeconds: &d, RenewTime: &rt},
	}
}

func TestNeedsRelease(t *testing.T) {
	dead := "host_0b7c"
	now := time.Now()
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  bool
	}{
		{"held by a dead process, fresh", lease("n", &dead, now), true},
		{"held, expired", lease("n", &dead, now.Add(-time.Hour)), true},
		{"no holder", lease("n", nil, now), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := needsRelease(tc.lease); got != tc.want {
				t.Errorf("needsRelease = %v, want %v", got, tc.want)
			}
		})
	}
	l := lease("n", &dead, now)
	r := released(l)
	if r.Spec.HolderIdentity != nil || !r.Spec.RenewTime.Equal(l.Spec.RenewTime) || l.Spec.HolderIdentity == nil {
		t.Errorf("released: holder %v renew %v; original holder %v", r.Spec.HolderIdentity, r.Spec.RenewTime, l.Spec.HolderIdentity)
	}
}

// TestReleaseLeases: the leases of the provider's nodes lose their holder;
// the lease of a node the provider did not make (a real kubelet's, or
// another cluster's) is left alone.
func TestReleaseLeases(t *testing.T) {
	cluster := nodeprovider.Cluster{Key: "default/demo", Name: "demo"}
	dead, kubelet := "host_dead", "real-node"
	now := time.Now()
	tmpl := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "demo-gpu-0"}}
	ours0 := nodeFor(cluster, nodeprovider.NodeSpec{MachineName: "gpu-0", Template: tmpl})
	ours1 := nodeFor(cluster, nodeprovider.NodeSpec{MachineName: "gpu-1", Template: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "demo-gpu-1"}}})
	realNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real"}}
	client := fake.NewClientset(ours0, ours1, realNode,
		lease("demo-gpu-0", &dead, now), lease("demo-gpu-1", nil, now), lease("real", &kubelet, now))

	n, err := releaseLeases(context.Background(), client, cluster)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("released %d leases, want 1", n)
	}
	get := func(name string) *coordinationv1.Lease {
		l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if h := get("demo-gpu-0").Spec.HolderIdentity; h != nil {
		t.Errorf("lease of demo-gpu-0 still held by %q", *h)
	}
	if h := get("real").Spec.HolderIdentity; h == nil || *h != kubelet {
		t.Errorf("lease of the real node changed: holder %v", h)
	}

	empty := fake.NewClientset()
	if n, err := releaseLeases(context.Background(), empty, cluster); err != nil || n != 0 {
		t.Errorf("no nodes: released %d, err %v", n, err)
	}
}
