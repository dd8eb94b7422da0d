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
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/pki"
)

func testBundle(t *testing.T) pki.Bundle {
	t.Helper()
	b, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{ClusterName: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loopbackNet is the local runtime's addon network of a plane at 6443.
var loopbackNet = controlplane.AddonNetwork{APIServer: "https://127.0.0.1:6443", BindAddress: "127.0.0.1"}

// TestMetricsServerProcess: metrics-server serves TLS on loopback with the
// certificate the aggregator checks, authenticates the aggregator by the
// front-proxy CA, and verifies the kubelets against the cluster CA.
func TestMetricsServerProcess(t *testing.T) {
	b := testBundle(t)
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo"}, Status: fkev1.ClusterStatus{Ports: fkev1.ClusterPorts{MetricsServer: 40123}}}
	p, err := MetricsServer{}.Process(cl, loopbackNet, b)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != MetricsServerName || p.Binary != "metrics-server" || p.Port != 40123 {
		t.Errorf("name %q binary %q port %d", p.Name, p.Binary, p.Port)
	}
	dir := controlplane.AddonDirVar
	for _, want := range []string{
		"--bind-address=" + controlplane.AddonBindVar, "--secure-port=40123",
		"--tls-cert-file=" + dir + "/tls.crt", "--tls-private-key-file=" + dir + "/tls.key",
		"--requestheader-client-ca-file=" + dir + "/front-proxy-ca.crt", "--requestheader-allowed-names=front-proxy-client",
		"--client-ca-file=" + dir + "/ca.crt", "--kubelet-certificate-authority=" + dir + "/ca.crt",
		"--authentication-kubeconfig=" + dir + "/kubeconfig", "--authorization-kubeconfig=" + dir + "/kubeconfig",
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
	// The files are the cluster's: the serving certificate names the
	// Service the aggregator dials and chains to the CA of the APIService's caBundle.
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
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "metrics-server.kube-system.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	kc, err := clientcmd.Load(p.Files["kubeconfig"])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		if c.Server != "https://127.0.0.1:6443" {
			t.Errorf("kubeconfig server %s", c.Server)
		}
	}
	for _, u := range kc.AuthInfos {
		block, _ := pem.Decode(u.ClientCertificateData)
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil || c.Subject.CommonName != pki.MetricsServerUser {
			t.Errorf("client certificate %v, %v", c, err)
		}
	}
	if p.HealthURL != "https://127.0.0.1:40123/livez" || p.HealthServerName != "metrics-server.kube-system.svc" {
		t.Errorf("health check %s as %s", p.HealthURL, p.HealthServerName)
	}

	// Without a port or a certificate there is no process.
	if _, err := (MetricsServer{}).Process(&fkev1.Cluster{}, loopbackNet, b); err == nil {
		t.Error("no port: want an error")
	}
	short := pki.Bundle{pki.CACertFile: b[pki.CACertFile]}
	if _, err := (MetricsServer{}).Process(cl, loopbackNet, short); err == nil || !strings.Contains(err.Error(), "front-proxy-ca.crt") {
		t.Errorf("missing certificates: %v", err)
	}
}

func TestMetricsServerEnabled(t *testing.T) {
	for _, tc := range []struct {
		enabled *bool
		want    bool
	}{{nil, true}, {ptr.To(true), true}, {ptr.To(false), false}} {
		cl := &fkev1.Cluster{Spec: fkev1.ClusterSpec{Addons: fkev1.ClusterAddons{MetricsServer: fkev1.MetricsServerAddon{Enabled: tc.enabled}}}}
		if got := (MetricsServer{}).Enabled(cl); got != tc.want {
			t.Errorf("enabled %v: got %v, want %v", tc.enabled, got, tc.want)
		}
	}
}

func TestAPIServiceAvailable(t *testing.T) {
	svc := func(conds ...apiregv1.APIServiceCondition) *apiregv1.APIService {
		return &apiregv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: MetricsAPIService}, Status: apiregv1.APIServiceStatus{Conditions: conds}}
	}
	for _, tc := range []struct {
		name string
		svc  *apiregv1.APIService
		ok   bool
		why  string
	}{
		{"not checked yet", svc(), false, "not checked"},
		{"available", svc(apiregv1.APIServiceCondition{Type: apiregv1.Available, Status: apiregv1.ConditionTrue}), true, "serves v1beta1.metrics.k8s.io"},
		{"unreachable", svc(apiregv1.APIServiceCondition{Type: apiregv1.Available, Status: apiregv1.ConditionFalse,
			Reason: "FailedDiscoveryCheck", Message: "connection refused"}), false, "FailedDiscoveryCheck: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := apiServiceAvailable(tc.svc)
			if ok != tc.ok || !strings.Contains(why, tc.why) {
				t.Errorf("got %v %q, want %v with %q", ok, why, tc.ok, tc.why)
			}
		})
	}
}

// TestAddonImages: the hosted runtime has an image of each addon binary it
// may be asked to run, metrics-server's tagged with the version fke runs.
func TestAddonImages(t *testing.T) {
	si, ok := image.Addon(metricsServerAPI.binary)
	if !ok || !strings.HasSuffix(si.Name, ":"+MetricsServerVersion) {
		t.Errorf("metrics-server image %+v (%v), want tag %s", si, ok, MetricsServerVersion)
	}
	for _, b := range []string{gpuMetricsAPI.binary, VPABinary} {
		if _, ok := image.Addon(b); !ok {
			t.Errorf("no image of %s", b)
		}
	}
}
