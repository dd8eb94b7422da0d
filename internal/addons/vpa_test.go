package addons

import (
	"slices"
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
	ps, err := VerticalPodAutoscaler{}.Processes(cl, loopbackNet, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Name != VPAName || ps[0].Binary != VPABinary {
		t.Fatalf("processes %+v, want one %s running %s", ps, VPAName, VPABinary)
	}
	p := ps[0]
	args := strings.Join(p.Args, " ")
	for _, want := range []string{
		"--kubeconfig=" + controlplane.AddonDirVar + "/kubeconfig",
		"--webhook-address=" + controlplane.AddonBindVar + ":30123",
		"--client-ca-file=" + controlplane.AddonDirVar + "/ca.crt",
		"--allowed-clients=" + pki.APIServerWebhookUser + "," + pki.ManagerUser,
		"--status-lease-namespace=kube-system",
		"--interval=" + MetricResolution,
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	if !strings.Contains(string(p.Files[vpaKubeconfig]), pki.VPAUser) {
		t.Errorf("kubeconfig is not for %s", pki.VPAUser)
	}
	if string(p.Files[vpaCA]) != string(b[pki.CACertFile]) {
		t.Error("the webhook's client CA is not the cluster CA")
	}
	// The readiness check presents fke-manager's certificate, one the
	// webhook admits.
	kp, err := pki.ParseKeyPair(p.HealthClientCert, p.HealthClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.HealthURL != "https://127.0.0.1:30123/healthz" || p.HealthServerName != pki.VPAWebhookServiceName || !slices.Contains(VPAWebhookClients, kp.Cert.Subject.CommonName) {
		t.Errorf("health check %s as %s", p.HealthURL, kp.Cert.Subject.CommonName)
	}

	if _, err := (VerticalPodAutoscaler{}).Processes(&fkev1.Cluster{}, loopbackNet, b); err == nil {
		t.Error("no error without a webhook port")
	}
	short := pki.Bundle{pki.CACertFile: b[pki.CACertFile]}
	if _, err := (VerticalPodAutoscaler{}).Processes(cl, loopbackNet, short); err == nil || !strings.Contains(err.Error(), pki.VPAWebhookCertFile) {
		t.Errorf("missing certificate: %v", err)
	}
}

func TestVPAWebhook(t *testing.T) {
	w := vpaWebhook(30123, []byte("CA"), nil)
	if len(w.Webhooks) != 1 {
		t.Fatalf("%d webhooks", len(w.Webhooks))
	}
	h := w.Webhooks[0]
	if s := h.ClientConfig.Service; h.ClientConfig.URL != nil || s == nil || *s.Namespace != "kube-system" || *s.Name != VPAWebhookService || *s.Port != 30123 ||
		string(h.ClientConfig.CABundle) != "CA" {
		t.Errorf("client config %+v", h.ClientConfig)
	}
	if *h.FailurePolicy != "Ignore" {
		t.Errorf("failure policy %s: a VPA that is down must not block pods", *h.FailurePolicy)
	}
	if len(h.Rules) != 2 || h.Rules[0].Resources[0] != "pods" || h.Rules[1].Resources[0] != "verticalpodautoscalers" {
		t.Errorf("rules %+v", h.Rules)
	}
}
