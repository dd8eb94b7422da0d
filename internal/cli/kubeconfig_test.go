package cli

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"fke.dev/fke/internal/pki"
)

func TestMergeKubeconfig(t *testing.T) {
	ca, err := pki.NewCA("demo", 0)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := ca.Issue(pki.CertSpec{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}, Usages: pki.UsageClient})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := pki.Kubeconfig("demo", "https://127.0.0.1:6443", ca.CertPEM(), admin.CertPEM(), admin.KeyPEM(), "kubernetes-admin")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config")
	existing := clientcmdapi.NewConfig()
	existing.Clusters["other"] = &clientcmdapi.Cluster{Server: "https://other:6443"}
	existing.AuthInfos["other"] = &clientcmdapi.AuthInfo{Token: "t"}
	existing.Contexts["other"] = &clientcmdapi.Context{Cluster: "other", AuthInfo: "other"}
	existing.CurrentContext = "other"
	if err := clientcmd.WriteToFile(*existing, path); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)

	got, err := mergeKubeconfig(kc, "fke-demo")
	if err != nil || got != path {
		t.Fatalf("mergeKubeconfig = %q, %v", got, err)
	}
	merged, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if merged.CurrentContext != "fke-demo" || merged.Contexts["other"] == nil || merged.Clusters["fke-demo"].Server != "https://127.0.0.1:6443" {
		t.Fatalf("merged config: current %q, contexts %v", merged.CurrentContext, merged.Contexts)
	}
	// Merging again replaces the entry instead of adding one.
	if _, err := mergeKubeconfig(kc, "fke-demo"); err != nil {
		t.Fatal(err)
	}
	again, _ := clientcmd.LoadFromFile(path)
	if len(again.Contexts) != 2 {
		t.Fatalf("contexts after a second merge: %d, want 2", len(again.Contexts))
	}
	if st, _ := os.Stat(path); st.Mode().Perm()&0o077 != 0 {
		t.Errorf("kubeconfig mode %v is readable by others", st.Mode().Perm())
	}
}
