package local_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/controlplane/local"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
	"fke.dev/fke/internal/versions"
	"fke.dev/fke/test/testenv"
)

// TestAPIServerAdvertisesNodeAddress runs a real control plane with a node
// address: its certificate covers the address and the endpoint reconciler
// points the kubernetes Service at it.
func TestAPIServerAdvertisesNodeAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane")
	}
	const nodeAddr = "172.29.0.1"
	rt, spec, cfg := startPlane(t, testenv.BinDir(t), "adv", "v1.37.2", nodeAddr)
	free := []int{spec.Ports.APIServer}
	ctx := context.Background()

	conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(free[0]), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reading the served certificate
	if err != nil {
		t.Fatal(err)
	}
	served := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if err := served.VerifyHostname(nodeAddr); err != nil {
		t.Fatalf("serving certificate does not cover %s: %v", nodeAddr, err)
	}

	_ = rt
	cs := kubernetes.NewForConfigOrDie(cfg)
	want := net.JoinHostPort(nodeAddr, strconv.Itoa(free[0]))
	testenv.Eventually(t, time.Minute, "kubernetes endpoints on the node address", func() error {
		ep, err := cs.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{}) //nolint:staticcheck // the reconciler writes Endpoints
		if err != nil {
			return err
		}
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				for _, p := range s.Ports {
					if net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))) == want {
						return nil
					}
				}
			}
		}
		return fmt.Errorf("kubernetes endpoints are %+v, want %s", ep.Subsets, want)
	})
}

// startPlane runs a control plane of Kubernetes version for cluster
// default/name until the test ends, waits until it is ready and returns
// its runtime, spec and an admin client configuration.
func startPlane(t *testing.T, bin, name, version, nodeAddr string) (*local.Runtime, controlplane.Spec, *rest.Config) {
	t.Helper()
	return startPlaneAs(t, bin, "default/"+name, version, nodeAddr, false, false)
}

// startPlaneAs is startPlane for any key, as a standby plane or not, in
// one process (Runtime.OneProcessPlanes) or in one per component.
func startPlaneAs(t *testing.T, bin, key, version, nodeAddr string, standby, oneProcess bool) (*local.Runtime, controlplane.Spec, *rest.Config) {
	t.Helper()
	rt, err := local.New(t.TempDir(), binaries.Finder{Dir: bin}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if oneProcess {
		if err := rt.OneProcessPlanes(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = rt.StopAll(context.Background()) })
	spec, cfg := ensurePlane(t, rt, key, version, nodeAddr, standby)
	return rt, spec, cfg
}

// ensurePlane starts a control plane of version under key on rt, with a
// new PKI and free ports, and waits until it is ready.
func ensurePlane(t *testing.T, rt *local.Runtime, key, version, nodeAddr string, standby bool) (controlplane.Spec, *rest.Config) {
	t.Helper()
	name := filepath.Base(key)
	ips, err := controlplane.APIServerIPs("10.96.0.0/16", nodeAddr)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{ClusterName: name, APIServerIPs: ips})
	if err != nil {
		t.Fatal(err)
	}
	if bundle[encryption.ConfigFile], err = encryption.New(); err != nil {
		t.Fatal(err)
	}
	free, err := supervisor.FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec := controlplane.Spec{
		Key: key, Standby: standby, Version: version, PodCIDR: "10.112.0.0/14", ServiceCIDR: "10.96.0.0/16", PKI: bundle, NodeAddress: nodeAddr,
		Ports: controlplane.Ports{APIServer: free[0], EtcdClient: free[1], EtcdPeer: free[2], ControllerManager: free[3], Scheduler: free[4]},
	}
	st, err := rt.Ensure(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := rt.WaitReady(wctx, spec.Key); err != nil {
		t.Fatal(err)
	}
	kc, err := pki.Kubeconfig(name, st.Endpoint, bundle[pki.CACertFile], bundle[pki.AdminCertFile], bundle[pki.AdminKeyFile], pki.AdminUser)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	return spec, cfg
}

// TestUpgradeWithoutGap upgrades a real control plane from the previous
// minor to the default version, component by component, while a client
// reads the API every 100 ms: the data stays, every component reports the
// new version, and the API never goes unanswered for more than a second.
func TestUpgradeWithoutGap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane")
	}
	rt, spec, cfg := startPlane(t, testenv.BinDir(t), "up", versions.Previous, "")
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, err := cs.Discovery().ServerVersion(); err != nil || v.GitVersion != versions.Previous {
		t.Fatalf("server version %v, %v; want %s", v, err, versions.Previous)
	}
	probe, err := testenv.ProbeAPI(cfg, "/api/v1/namespaces/default/configmaps/kept", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	target := spec
	target.Version = versions.Default
	start := time.Now()
	for _, c := range []string{controlplane.APIServer, controlplane.ControllerManager, controlplane.Scheduler} {
		if err := rt.Upgrade(ctx, target, c); err != nil {
			probe.Stop()
			t.Fatalf("upgrading %s: %v", c, err)
		}
	}
	took := time.Since(start)
	gap, summary := probe.Stop()
	t.Logf("upgrade %s → %s in %s; %s", versions.Previous, versions.Default, took.Round(time.Millisecond), summary)
	if gap > time.Second {
		t.Errorf("the API went unanswered for %s during the upgrade (%s)", gap, summary)
	}
	st := mustStatus(t, rt, spec.Key)
	for _, c := range st.Components {
		if c.Name != controlplane.Etcd && c.Version != versions.Default {
			t.Errorf("%s runs %q after the upgrade, want %s", c.Name, c.Version, versions.Default)
		}
	}
	if !st.Ready() {
		t.Errorf("not ready after the upgrade: %v", st.NotReady())
	}
	if v, err := cs.Discovery().ServerVersion(); err != nil || v.GitVersion != versions.Default {
		t.Errorf("server version %v, %v; want %s", v, err, versions.Default)
	}
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Errorf("data written before the upgrade: %v, %v", got, err)
	}
	// Upgrading again is a no-op.
	if err := rt.Upgrade(ctx, target, controlplane.APIServer); err != nil {
		t.Errorf("second upgrade: %v", err)
	}
}

// TestUpgradeStepFailure: a new version whose kube-apiserver or
// kube-controller-manager exits at start is given up within seconds; the
// cluster keeps serving at the version it ran, and every component runs
// that version again.
func TestUpgradeStepFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane")
	}
	// The real binaries, and a "v1.99.0" whose components exit at once.
	bin := t.TempDir()
	real := testenv.BinDir(t)
	for _, b := range []string{binaries.Etcd, binaries.KubeAPIServer, binaries.KubeControllerManager, binaries.KubeScheduler} {
		if err := os.Symlink(filepath.Join(real, b), filepath.Join(bin, b)); err != nil {
			t.Fatal(err)
		}
	}
	const broken = "v1.99.0"
	if err := os.MkdirAll(filepath.Join(bin, broken), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{binaries.KubeAPIServer, binaries.KubeControllerManager} {
		if err := os.WriteFile(filepath.Join(bin, broken, b), []byte("#!/bin/sh\necho broken build >&2\nexit 3\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rt, spec, cfg := startPlane(t, bin, "fail", versions.Default, "")
	ctx := context.Background()
	probe, err := testenv.ProbeAPI(cfg, "/api/v1/namespaces/default", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	target := spec
	target.Version = broken
	for _, c := range []string{controlplane.APIServer, controlplane.ControllerManager} {
		start := time.Now()
		err := rt.Upgrade(ctx, target, c)
		t.Logf("upgrading %s to a broken build: %v (%s)", c, err, time.Since(start).Round(10*time.Millisecond))
		if err == nil || !strings.Contains(err.Error(), "did not become ready") || !strings.Contains(err.Error(), "broken build") {
			t.Errorf("upgrading %s: %v, want a failure quoting its log", c, err)
		}
		if time.Since(start) > time.Minute {
			t.Errorf("giving up on %s took %s", c, time.Since(start))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := rt.WaitReady(wctx, spec.Key); err != nil {
		t.Fatal(err)
	}
	gap, summary := probe.Stop()
	if gap > time.Second {
		t.Errorf("the API went unanswered for %s while the upgrade failed (%s)", gap, summary)
	}
	for _, c := range mustStatus(t, rt, spec.Key).Components {
		if c.Name != controlplane.Etcd && c.Version != versions.Default {
			t.Errorf("%s runs %q after the failed step, want %s", c.Name, c.Version, versions.Default)
		}
	}
}

// mustStatus is rt's status of key (the local runtime observes its own
// processes, so it never fails).
func mustStatus(t *testing.T, rt *local.Runtime, key string) controlplane.Status {
	t.Helper()
	st, err := rt.Status(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
