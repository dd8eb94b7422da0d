package local

import (
	"os"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/admission"
	webhookconfig "k8s.io/apiserver/pkg/admission/plugin/webhook/config"
	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/tools/clientcmd"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

func TestAPIServerAdvertises(t *testing.T) {
	l := newLayout(t.TempDir())
	loopback := apiServerArgs(l, controlplane.Spec{ServiceCIDR: "10.96.0.0/16"})
	for _, want := range []string{"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"} {
		if !slices.Contains(loopback, want) {
			t.Errorf("without a node address, args lack %s: %v", want, loopback)
		}
	}
	nodes := apiServerArgs(l, controlplane.Spec{ServiceCIDR: "10.96.0.0/16", NodeAddress: "172.29.0.1"})
	if !slices.Contains(nodes, "--advertise-address=172.29.0.1") || !slices.Contains(nodes, "--bind-address=127.0.0.1") {
		t.Errorf("with a node address, args = %v", nodes)
	}
	for _, a := range nodes {
		if a == "--endpoint-reconciler-type=none" || a == "--advertise-address=127.0.0.1" {
			t.Errorf("with a node address, args keep %s", a)
		}
	}
}

func TestAPIServerAuthenticatesToWebhooks(t *testing.T) {
	dir := t.TempDir()
	l := newLayout(dir)
	b, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{ClusterName: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	spec := controlplane.Spec{Key: "ns/demo", ServiceCIDR: "10.96.0.0/16", PKI: b, Ports: controlplane.Ports{APIServer: 6443}}
	if err := l.write(spec); err != nil {
		t.Fatal(err)
	}
	args := apiServerArgs(l, spec)
	if !slices.Contains(args, "--admission-control-config-file="+l.admissionConfig()) {
		t.Fatalf("args lack the admission configuration: %v", args)
	}

	// The API server's own loaders read the files.
	scheme := runtime.NewScheme()
	utilruntime.Must(apiserverv1.AddToScheme(scheme))
	utilruntime.Must(apiserverapi.AddToScheme(scheme))
	plugins := []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"}
	provider, err := admission.ReadAdmissionConfiguration(plugins, l.admissionConfig(), scheme)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plugins {
		r, err := provider.ConfigFor(p)
		if err != nil || r == nil {
			t.Fatalf("%s: no configuration (%v)", p, err)
		}
		wc, err := webhookconfig.LoadConfig(r)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if wc.KubeConfigFile != l.webhookKubeconfig() {
			t.Errorf("%s reads %q, want %s", p, wc.KubeConfigFile, l.webhookKubeconfig())
		}
	}

	// Every webhook host ("*") gets the webhook client certificate.
	kc, err := clientcmd.LoadFromFile(l.webhookKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	user := kc.AuthInfos["*"]
	if user == nil || len(kc.AuthInfos) != 1 {
		t.Fatalf("users %v, want only *", kc.AuthInfos)
	}
	cert, err := os.ReadFile(user.ClientCertificate)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := pki.ParseKeyPair(cert, b[pki.APIServerWebhookClientKeyFile])
	if err != nil {
		t.Fatalf("the kubeconfig's certificate and the bundle's key: %v", err)
	}
	if kp.Cert.Subject.CommonName != pki.APIServerWebhookUser || user.ClientKey != l.PKI(pki.APIServerWebhookClientKeyFile) {
		t.Errorf("webhook client %s with key %s", kp.Cert.Subject.CommonName, user.ClientKey)
	}
}
