package addons

import (
	"strings"
	"testing"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

func TestVPAProcesses(t *testing.T) {
	b, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{ClusterName: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	cl := &fkev1.Cluster{}
	cl.Name = "demo"
	cl.Status.Ports.VPAWebhook = 30123
	ps, err := VerticalPodAutoscaler{}.Processes(cl, "https://127.0.0.1:6443", b)
	if err != nil {
		t.Fatal(err)
	}
	byBinary := map[string]controlplane.Addon{}
	for _, p := range ps {
		if !strings.HasPrefix(p.Name, VPAName+"-") {
			t.Errorf("process %s is not named after the addon", p.Name)
		}
		byBinary[p.Binary] = p
		args := strings.Join(p.Args, " ")
		for _, want := range []string{"--kubeconfig=" + controlplane.AddonDirVar + "/kubeconfig", "--address=127.0.0.1:0"} {
			if !strings.Contains(args, want) {
				t.Errorf("%s: args %q lack %s", p.Name, args, want)
			}
		}
		if !strings.Contains(string(p.Files[vpaKubeconfig]), pki.VPAUser) {
			t.Errorf("%s: kubeconfig is not for %s", p.Name, pki.VPAUser)
		}
	}
	for _, bin := range []string{VPARecommender, VPAUpdater, VPAAdmissionController} {
		if _, ok := byBinary[bin]; !ok {
			t.Errorf("no %s process", bin)
		}
	}
	ac := strings.Join(byBinary[VPAAdmissionController].Args, " ")
	for _, want := range []string{"--port=30123", "--register-webhook=false", "--status-lease-namespace=kube-system"} {
		if !strings.Contains(ac, want) {
			t.Errorf("admission controller args %q lack %s", ac, want)
		}
	}
	if up := strings.Join(byBinary[VPAUpdater].Args, " "); !strings.Contains(up, "--admission-controller-status-lease-namespace=kube-system") {
		t.Errorf("the updater does not read the admission controller's lease where it is written: %s", up)
	}

	if _, err := (VerticalPodAutoscaler{}).Processes(&fkev1.Cluster{}, "https://127.0.0.1:6443", b); err == nil {
		t.Error("no error without a webhook port")
	}
	short := pki.Bundle{pki.CACertFile: b[pki.CACertFile]}
	if _, err := (VerticalPodAutoscaler{}).Processes(cl, "https://127.0.0.1:6443", short); err == nil || !strings.Contains(err.Error(), pki.VPAWebhookCertFile) {
		t.Errorf("missing certificate: %v", err)
	}
}

func TestVPAWebhook(t *testing.T) {
	w := vpaWebhook(30123, []byte("CA"), nil)
	if len(w.Webhooks) != 1 {
		t.Fatalf("%d webhooks", len(w.Webhooks))
	}
	h := w.Webhooks[0]
	if *h.ClientConfig.URL != "https://127.0.0.1:30123" || string(h.ClientConfig.CABundle) != "CA" {
		t.Errorf("client config %+v", h.ClientConfig)
	}
	if *h.FailurePolicy != "Ignore" {
		t.Errorf("failure policy %s: a VPA that is down must not block pods", *h.FailurePolicy)
	}
	if len(h.Rules) != 2 || h.Rules[0].Resources[0] != "pods" || h.Rules[1].Resources[0] != "verticalpodautoscalers" {
		t.Errorf("rules %+v", h.Rules)
	}
}
