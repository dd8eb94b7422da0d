package local

import (
	"net/netip"
	"os"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"fke.dev/fke/internal/bootstrap"
	"fke.dev/fke/internal/hostnet"
)

// A node given no kube-proxy kubeconfig points kube-proxy at the
// certificate it keeps itself; one given a kubeconfig writes that.
func TestProxyKubeconfigOfNode(t *testing.T) {
	cfg := NodeConfig{
		Name: "n1", Net: hostnet.Node{Netns: "fke-test.n1", IP: netip.MustParseAddr("172.29.0.250")},
		Server: "https://172.29.0.1:6443", TLSServerName: "kubernetes", CAPEM: []byte("ca"),
		ClusterCIDR: "10.112.0.0/12", ClusterDNS: "10.96.0.10", MaxPods: 110,
	}
	cfg.Dir = t.TempDir()
	n := NewNode(cfg, nil, nil, nil)
	if err := n.writeConfig(); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(n.Layout().ProxyKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := kc.Contexts[kc.CurrentContext]
	auth, cluster := kc.AuthInfos[ctx.AuthInfo], kc.Clusters[ctx.Cluster]
	want := bootstrap.ProxyCertPath(n.Layout().ProxyCertDir())
	if auth.ClientCertificate != want || auth.ClientKey != want || len(auth.ClientCertificateData) > 0 || auth.Token != "" {
		t.Errorf("kube-proxy authenticates with %+v, want the files %s", auth, want)
	}
	if cluster.Server != cfg.Server || cluster.TLSServerName != "kubernetes" || string(cluster.CertificateAuthorityData) != "ca" {
		t.Errorf("kube-proxy's cluster = %+v", cluster)
	}

	cfg.Dir, cfg.ProxyKubeconfig = t.TempDir(), []byte("given")
	n = NewNode(cfg, nil, nil, nil)
	if err := n.writeConfig(); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(n.Layout().ProxyKubeconfig()); err != nil || string(data) != "given" {
		t.Errorf("kube-proxy kubeconfig = %q, %v; want the given one", data, err)
	}
}
