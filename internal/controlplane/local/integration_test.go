package local_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/controlplane/local"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
	"fke.dev/fke/test/testenv"
)

// TestAPIServerAdvertisesNodeAddress runs a real control plane with a node
// address: its certificate covers the address and the endpoint reconciler
// points the kubernetes Service at it.
func TestAPIServerAdvertisesNodeAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane")
	}
	bin := testenv.BinDir(t)
	const nodeAddr = "172.29.0.1"
	ips, err := controlplane.APIServerIPs("10.96.0.0/16", nodeAddr)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{ClusterName: "adv", APIServerIPs: ips})
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
	rt, err := local.New(t.TempDir(), binaries.Finder{Dir: bin}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { _ = rt.StopAll(context.Background()) })
	spec := controlplane.Spec{
		Key: "default/adv", Version: "v1.37.2", PodCIDR: "10.112.0.0/14", ServiceCIDR: "10.96.0.0/16", PKI: bundle, NodeAddress: nodeAddr,
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

	conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(free[0]), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reading the served certificate
	if err != nil {
		t.Fatal(err)
	}
	served := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if err := served.VerifyHostname(nodeAddr); err != nil {
		t.Fatalf("serving certificate does not cover %s: %v", nodeAddr, err)
	}

	kc, err := pki.Kubeconfig("adv", st.Endpoint, bundle[pki.CACertFile], bundle[pki.AdminCertFile], bundle[pki.AdminKeyFile], pki.AdminUser)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
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
