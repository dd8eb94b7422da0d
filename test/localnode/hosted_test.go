package localnode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/controlplane/hosted"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/manager"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/test/testenv"
)

// TestHostedRuntime: an fke cluster with a local node is the management
// cluster, and the hosted runtime runs two tenant control planes in it at
// once, one with a dedicated etcd and one in the shared etcd. Each serves
// its own admin; neither tenant's credentials open the other's API or
// etcd keys; killing an API server pod leaves the API answering through
// the other replica; deleting a control plane removes its namespace and
// its keys, user and role in the shared etcd.
func TestHostedRuntime(t *testing.T) {
	requireNodeTools(t)
	e := upForLocalNodes(t)
	e.MustRun("cluster", "create", "mgmt", "--wait", "--metrics-server=false", "--gpu-metrics=false")
	e.WaitSystemImages()
	e.MustRun("nodepool", "create", "mgmt/cpu", "--provider", "local", "--instance-type", "cpu-small", "--replicas", "1")
	cs := e.Tenant("mgmt")
	waitReadyLocalNode(t, cs)

	registry := pushControlPlane(t, e)

	scheme, err := manager.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	mgmt, err := client.New(e.TenantConfig("mgmt"), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := hosted.New(hosted.Options{Client: mgmt, Registry: registry})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpHosted(t, cs)
		}
	})

	// Both control planes at once, as a manager reconciles two new
	// Clusters; each is polled as the cluster controller does.
	planes := map[string]*hostedPlane{
		hosted.Dedicated: {key: "team-a/dedicated", datastore: hosted.Dedicated},
		hosted.Shared:    {key: "team-b/shared", datastore: hosted.Shared},
	}
	var wg sync.WaitGroup
	for _, p := range planes {
		wg.Go(func() { p.create(t, rt) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, p := range planes {
		t.Logf("FIGURE hosted control plane (%s etcd) create -> /readyz: %s", p.datastore, p.ready.Round(10*time.Millisecond))
	}
	a, b := planes[hosted.Dedicated], planes[hosted.Shared]

	t.Run("each tenant serves its own admin and keeps its own objects", func(t *testing.T) {
		for _, p := range planes {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}, Data: map[string]string{"key": p.key}}
			if _, err := p.cs.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: %v", p.key, err)
			}
		}
		for _, p := range planes {
			got, err := p.cs.CoreV1().ConfigMaps("default").Get(t.Context(), "owner", metav1.GetOptions{})
			if err != nil || got.Data["key"] != p.key {
				t.Errorf("%s reads %v, %v", p.key, got.Data, err)
			}
		}
	})
	t.Run("credentials of one tenant open nothing of the other", func(t *testing.T) {
		cfg := rest.CopyConfig(b.cfg)
		cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = a.bundle[pki.AdminCertFile], a.bundle[pki.AdminKeyFile]
		other := kubernetes.NewForConfigOrDie(cfg)
		if _, err := other.CoreV1().ConfigMaps("default").Get(t.Context(), "owner", metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
			t.Errorf("%s's admin against %s: %v, want 401 Unauthorized", a.key, b.key, err)
		}
		// b's etcd user reads its own prefix and nothing else.
		own := sharedEtcdClient(t, mgmt, b.secret(t, mgmt))
		ns := hosted.Namespace(b.key)
		if resp, err := own.Get(t.Context(), hosted.Prefix(ns)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count == 0 {
			t.Errorf("%s reads its own prefix: %v keys, %v", b.key, resp, err)
		}
		for _, key := range []string{"/fke/fke-team-c-other/registry/", "/registry/", "/"} {
			if _, err := own.Get(t.Context(), key, clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
				t.Errorf("%s reads %s: %v, want permission denied", b.key, key, err)
			}
		}
		// a's etcd credentials come from its own etcd CA: the shared etcd
		// refuses the handshake.
		sec := a.secret(t, mgmt)
		if _, err := sharedEtcdClient(t, mgmt, sec).Get(t.Context(), "/fke/", clientv3.WithPrefix()); err == nil {
			t.Errorf("the shared etcd answers %s's etcd client certificate", a.key)
		}
	})
	t.Run("the API answers through the other replica while one API server pod is killed", func(t *testing.T) {
		for _, p := range planes {
			pods, err := cs.CoreV1().Pods(hosted.Namespace(p.key)).List(t.Context(), metav1.ListOptions{LabelSelector: hosted.LabelComponent + "=" + controlplane.APIServer})
			if err != nil || len(pods.Items) < 2 {
				t.Fatalf("%s: %d API server pods, %v; want 2", p.key, len(pods.Items), err)
			}
			probe, err := testenv.ProbeAPI(p.cfg, "/api/v1/namespaces/default", 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			victim := pods.Items[0].Name
			if err := cs.CoreV1().Pods(hosted.Namespace(p.key)).Delete(t.Context(), victim, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
			// Until its replacement serves.
			waitAPIServers(t, cs, p.key, victim)
			gap, summary := probe.Stop()
			t.Logf("FIGURE %s: API server pod killed -> replaced: %s", p.key, summary)
			if gap > 5*time.Second {
				t.Errorf("%s went unanswered for %s while one of two API servers was killed", p.key, gap)
			}
		}
	})
	t.Run("deleting a control plane removes its namespace and its shared etcd user", func(t *testing.T) {
		for _, p := range planes {
			if err := rt.Delete(t.Context(), p.key); err != nil {
				t.Fatalf("%s: %v", p.key, err)
			}
			if err := mgmt.Get(t.Context(), client.ObjectKey{Name: hosted.Namespace(p.key)}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s: namespace still there: %v", p.key, err)
			}
			if st, err := rt.Status(t.Context(), p.key); err != nil || len(st.Components) != 0 {
				t.Errorf("%s: status after delete %+v, %v", p.key, st, err)
			}
		}
		root := sharedEtcdClient(t, mgmt, rootSecret(t, mgmt))
		ns := hosted.Namespace(b.key)
		if resp, err := root.Get(t.Context(), hosted.Prefix(ns)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
			t.Errorf("%s's keys left in the shared etcd: %v, %v", b.key, resp, err)
		}
		if _, err := root.UserGet(t.Context(), ns); !errors.Is(err, rpctypes.ErrUserNotFound) {
			t.Errorf("%s's etcd user left: %v", b.key, err)
		}
		if _, err := root.RoleGet(t.Context(), ns); !errors.Is(err, rpctypes.ErrRoleNotFound) {
			t.Errorf("%s's etcd role left: %v", b.key, err)
		}
	})
}

// pushControlPlane pushes the hosted runtime's images to fke's registry
// and returns the registry the management cluster's nodes pull them from.
func pushControlPlane(t *testing.T, e *testenv.Env) string {
	t.Helper()
	start := time.Now()
	out := e.MustRun("image", "push-control-plane")
	m := regexp.MustCompile(`--hosted-registry=(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("push-control-plane printed no registry:\n%s", out)
	}
	t.Logf("FIGURE build and push the control-plane images: %s", time.Since(start).Round(10*time.Millisecond))
	return m[1]
}

// hostedPlane is one tenant control plane of the hosted runtime.
type hostedPlane struct {
	key, datastore string
	bundle         pki.Bundle
	cfg            *rest.Config
	cs             kubernetes.Interface
	ready          time.Duration
}

// create does what the cluster controller does for a new Cluster: the
// runtime's addresses, the PKI for them, then Ensure until every component
// is ready and the endpoint answers /readyz.
func (p *hostedPlane) create(t *testing.T, rt *hosted.Runtime) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	spec := controlplane.Spec{Key: p.key, Version: "v1.37.2", PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16", Datastore: p.datastore}
	addrs, err := rt.Addresses(ctx, spec)
	if err != nil {
		t.Errorf("%s: addresses: %v", p.key, err)
		return
	}
	b, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{
		ClusterName: p.key, APIServerIPs: addrs.APIServerIPs, APIServerDNSNames: addrs.APIServerDNSNames, EtcdDNSNames: addrs.EtcdDNSNames,
	})
	if err == nil {
		b[encryption.ConfigFile], _, err = encryption.Ensure(nil)
	}
	if err != nil {
		t.Errorf("%s: PKI: %v", p.key, err)
		return
	}
	spec.PKI, p.bundle = b, b
	var st controlplane.Status
	for {
		if st, err = rt.Ensure(ctx, spec); err == nil && st.Ready() {
			break
		}
		select {
		case <-ctx.Done():
			t.Errorf("%s not ready: %+v, last error %v", p.key, st, err)
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	kc, err := pki.Kubeconfig(p.key, st.Endpoint, b[pki.CACertFile], b[pki.AdminCertFile], b[pki.AdminKeyFile], pki.AdminUser)
	if err == nil {
		p.cfg, err = clientcmd.RESTConfigFromKubeConfig(kc)
	}
	if err != nil {
		t.Errorf("%s: %v", p.key, err)
		return
	}
	for testenv.Readyz(p.cfg) != nil {
		if ctx.Err() != nil {
			t.Errorf("%s: %s does not answer /readyz: %v", p.key, st.Endpoint, testenv.Readyz(p.cfg))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.ready = time.Since(start)
	p.cs = kubernetes.NewForConfigOrDie(p.cfg)
}

func (p *hostedPlane) secret(t *testing.T, c client.Client) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: hosted.Namespace(p.key), Name: hosted.SecretName}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// rootSecret holds the shared etcd's root pair, as datastore-client files.
func rootSecret(t *testing.T, c client.Client) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: manager.DefaultSystemNamespace, Name: hosted.SharedEtcdSecret}, s); err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{Data: map[string][]byte{"datastore-client.crt": s.Data["root.crt"], "datastore-client.key": s.Data["root.key"]}}
}

// sharedEtcdClient connects to the shared etcd's members at their pod
// addresses, trusting its CA, presenting secret's datastore-client pair.
func sharedEtcdClient(t *testing.T, c client.Client, secret *corev1.Secret) *clientv3.Client {
	t.Helper()
	ca := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: manager.DefaultSystemNamespace, Name: hosted.SharedEtcdSecret}, ca); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Data[pki.EtcdCACertFile])
	pair, err := tls.X509KeyPair(secret.Data["datastore-client.crt"], secret.Data["datastore-client.key"])
	if err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := c.List(t.Context(), &pods, client.InNamespace(manager.DefaultSystemNamespace), client.MatchingLabels{hosted.LabelComponent: hosted.SharedEtcdName}); err != nil {
		t.Fatal(err)
	}
	var eps []string
	for _, p := range pods.Items {
		if p.Status.PodIP != "" {
			eps = append(eps, "https://"+p.Status.PodIP+":2379")
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: hosted.SharedEtcdName + "." + manager.DefaultSystemNamespace + ".svc"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// waitAPIServers waits until key's API server Deployment has two ready
// pods again, none of them gone.
func waitAPIServers(t *testing.T, cs kubernetes.Interface, key, gone string) {
	t.Helper()
	testenv.Eventually(t, 3*time.Minute, key+"'s two API servers", func() error {
		pods, err := cs.CoreV1().Pods(hosted.Namespace(key)).List(t.Context(), metav1.ListOptions{LabelSelector: hosted.LabelComponent + "=" + controlplane.APIServer})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			if p.Name != gone && podReady(&p) {
				ready++
			}
		}
		if ready < 2 {
			return fmt.Errorf("%d ready API server pods", ready)
		}
		return nil
	})
}

// dumpHosted logs the hosted namespaces' pods and their last log lines.
func dumpHosted(t *testing.T, cs kubernetes.Interface) {
	nss, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("listing namespaces: %v", err)
		return
	}
	for _, ns := range nss.Items {
		if !strings.HasPrefix(ns.Name, "fke-") {
			continue
		}
		pods, _ := cs.CoreV1().Pods(ns.Name).List(context.Background(), metav1.ListOptions{})
		for _, p := range pods.Items {
			t.Logf("%s/%s: %s ready=%v", ns.Name, p.Name, p.Status.Phase, podReady(&p))
			tail := int64(15)
			logs, _ := cs.CoreV1().Pods(ns.Name).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(context.Background())
			t.Logf("%s", logs)
		}
	}
}
