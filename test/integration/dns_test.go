package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/supervisor"
	"fke.dev/fke/test/testenv"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestClusterDNS applies the CoreDNS addon to a real tenant and runs the
// real CoreDNS with the same Corefile (on loopback, with the admin
// kubeconfig instead of in-cluster credentials): it resolves the
// kubernetes Service and a new Service by name, forgets soon that a name
// was missing, and answers nothing for names outside the cluster.
func TestClusterDNS(t *testing.T) {
	coredns, err := (binaries.Finder{Dir: testenv.BinDir(t)}).Path(binaries.CoreDNS)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("coredns missing under CI: %v", err)
		}
		t.Skipf("coredns not built (run `make binaries`): %v", err)
	}
	e := testenv.Up(t)
	e.MustRun("cluster", "create", "dns", "--wait")
	ctx := context.Background()
	cs := e.Tenant("dns")
	cl := &fkev1.Cluster{}
	if err := e.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: "dns"}, cl); err != nil {
		t.Fatal(err)
	}
	opts := addons.DNSOptions{Image: "127.0.0.1:5000/fke/coredns:v1.15.0", ServiceCIDR: cl.Spec.Network.ServiceCIDR}
	for range 2 {
		if err := addons.EnsureCoreDNS(ctx, cs, opts); err != nil {
			t.Fatalf("applying CoreDNS to a real API server: %v", err)
		}
	}
	want, _ := addons.DNSServiceIP(cl.Spec.Network.ServiceCIDR)
	svc, err := cs.CoreV1().Services("kube-system").Get(ctx, addons.DNSServiceName, metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != want.String() {
		t.Fatalf("kube-dns Service: %v, clusterIP %s, want %s", err, svc.Spec.ClusterIP, want)
	}

	// service creates a ClusterIP Service name in default.
	service := func(name string) *corev1.Service {
		svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": name}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	web := service("web")
	kubernetesSvc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(e.MustRun("kubeconfig", "dns")), 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := supervisor.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	loop := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	corefile := filepath.Join(dir, "Corefile")
	cf := addons.CorefileFor(addons.CorefileOptions{
		Port: ":" + strconv.Itoa(ports[0]), Bind: "127.0.0.1", Kubeconfig: kubeconfig,
		HealthAddr: loop(ports[1]), ReadyAddr: loop(ports[2]), MetricsAddr: loop(ports[3]),
	})
	if err := os.WriteFile(corefile, []byte(cf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(coredns, "-conf", corefile)
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, loop(ports[0]))
	}}
	lookup := func(host string) ([]netip.Addr, error) {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return resolver.LookupNetIP(lctx, "ip4", host)
	}
	for host, ip := range map[string]string{
		"kubernetes.default.svc.cluster.local":   kubernetesSvc.Spec.ClusterIP,
		"web.default.svc.cluster.local":          web.Spec.ClusterIP,
		"kube-dns.kube-system.svc.cluster.local": want.String(),
	} {
		testenv.Eventually(t, 30*time.Second, "CoreDNS resolves "+host, func() error {
			addrs, err := lookup(host)
			if err != nil {
				return err
			}
			if len(addrs) != 1 || addrs[0].String() != ip {
				return fmt.Errorf("%s resolves to %v, want %s", host, addrs, ip)
			}
			return nil
		})
	}
	// A name asked for before it exists (an etcd member for its peers, an
	// API server for its etcd, while the EndpointSlices lag) is cached as
	// missing for 5 s at most, not the 30 s of a found one.
	const late = "late.default.svc.cluster.local"
	if addrs, err := lookup(late); err == nil {
		t.Fatalf("%s resolved to %v before its Service exists", late, addrs)
	}
	lateSvc := service("late")
	created := time.Now()
	testenv.Eventually(t, 12*time.Second, "CoreDNS resolves "+late+" soon after a lookup that missed", func() error {
		addrs, err := lookup(late)
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0].String() != lateSvc.Spec.ClusterIP {
			return fmt.Errorf("%s resolves to %v, want %s", late, addrs, lateSvc.Spec.ClusterIP)
		}
		return nil
	})
	t.Logf("FIGURE a name missed once resolves %s after its Service is created", time.Since(created).Round(100*time.Millisecond))
	if addrs, err := lookup("example.com"); err == nil {
		t.Fatalf("example.com resolved to %v: the Corefile must not forward out of the cluster", addrs)
	} else if !errors.As(err, new(*net.DNSError)) {
		t.Fatalf("example.com: %v", err)
	}
}
