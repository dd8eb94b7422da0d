package addons

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

// TestGPUMetricsProcess: the adapter serves TLS on loopback with the
// certificate the aggregator checks, authenticates the aggregator by the
// front-proxy CA, acts as its own user, and finds the GPU agents the
// GPU agent addon makes.
func TestGPUMetricsProcess(t *testing.T) {
	b := testBundle(t)
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo"}, Status: fkev1.ClusterStatus{Ports: fkev1.ClusterPorts{GPUMetrics: 40124}}}
	p, err := GPUMetrics{}.Process(cl, loopbackNet, b)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != GPUMetricsName || p.Binary != "fke-gpu-metrics" {
		t.Errorf("name %q binary %q", p.Name, p.Binary)
	}
	dir := controlplane.AddonDirVar
	for _, want := range []string{
		"--bind-address=" + controlplane.AddonBindVar, "--secure-port=40124",
		"--tls-cert-file=" + dir + "/tls.crt", "--tls-private-key-file=" + dir + "/tls.key",
		"--requestheader-client-ca-file=" + dir + "/front-proxy-ca.crt", "--requestheader-allowed-names=front-proxy-client",
		"--client-ca-file=" + dir + "/ca.crt", "--lister-kubeconfig=" + dir + "/kubeconfig",
		"--authentication-kubeconfig=" + dir + "/kubeconfig", "--authorization-kubeconfig=" + dir + "/kubeconfig",
		"--agent-namespace=kube-system", "--agent-selector=app.kubernetes.io/name=fke-gpu-agent", "--agent-port=9400",
	} {
		if !slices.Contains(p.Args, want) {
			t.Errorf("args lack %s: %v", want, p.Args)
		}
	}
	for _, a := range p.Args {
		if strings.Contains(a, "insecure") || strings.Contains(a, "0.0.0.0") {
			t.Errorf("insecure or open argument %s", a)
		}
	}
	if !bytes.Equal(p.Files["ca.crt"], b[pki.CACertFile]) || !bytes.Equal(p.Files["front-proxy-ca.crt"], b[pki.FrontProxyCACertFile]) {
		t.Error("CA files are not the cluster's")
	}
	block, _ := pem.Decode(p.Files["tls.crt"])
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(b[pki.CACertFile])
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: GPUMetricsService + ".kube-system.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	kc, err := clientcmd.Load(p.Files["kubeconfig"])
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range kc.AuthInfos {
		block, _ := pem.Decode(u.ClientCertificateData)
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil || c.Subject.CommonName != pki.GPUMetricsUser || len(c.Subject.Organization) != 0 {
			t.Errorf("client certificate %v, %v: want %s in no group", c, err, pki.GPUMetricsUser)
		}
	}
	if p.HealthURL != "https://127.0.0.1:40124/livez" || p.HealthServerName != pki.GPUMetricsServiceName {
		t.Errorf("health check %s as %s", p.HealthURL, p.HealthServerName)
	}
	if _, err := (GPUMetrics{}).Process(&fkev1.Cluster{}, loopbackNet, b); err == nil {
		t.Error("no port: want an error")
	}
	short := pki.Bundle{pki.CACertFile: b[pki.CACertFile], pki.FrontProxyCACertFile: b[pki.FrontProxyCACertFile]}
	if _, err := (GPUMetrics{}).Process(cl, loopbackNet, short); err == nil || !strings.Contains(err.Error(), "gpu-metrics.crt") {
		t.Errorf("missing certificates: %v", err)
	}
}

func TestGPUMetricsEnabled(t *testing.T) {
	for _, tc := range []struct {
		enabled *bool
		want    bool
	}{{nil, true}, {ptr.To(true), true}, {ptr.To(false), false}} {
		cl := &fkev1.Cluster{Spec: fkev1.ClusterSpec{Addons: fkev1.ClusterAddons{GPUMetrics: fkev1.GPUMetricsAddon{Enabled: tc.enabled}}}}
		if got := (GPUMetrics{}).Enabled(cl); got != tc.want {
			t.Errorf("enabled %v: got %v, want %v", tc.enabled, got, tc.want)
		}
	}
}
