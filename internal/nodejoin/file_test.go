package nodejoin

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestBootstrapFile(t *testing.T) {
	good := BootstrapFile{
		Cluster: "default/demo", Pool: "metal", Server: "https://172.29.0.1:6443", CertificateAuthorityData: []byte("pem"),
		Token: "abcdef.0123456789abcdef", ClusterDNS: "10.96.0.10", PodCIDR: "10.112.0.0/12",
		Registry: "172.29.0.1:5000", TokenExpires: &metav1.Time{Time: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)},
	}
	data, err := good.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseBootstrapFile(data)
	if err != nil {
		t.Fatalf("round trip: %v", err)
	}
	if got.Token != good.Token || string(got.CertificateAuthorityData) != "pem" || got.Registry != good.Registry ||
		!got.TokenExpires.Equal(good.TokenExpires) || got.TokenID() != "abcdef" {
		t.Errorf("round trip = %+v", got)
	}
	for name, tc := range map[string]struct {
		data string
		want string
	}{
		"not a bootstrap file":  {"kind: Pod\napiVersion: v1\n", "write it with `fke node bootstrap-file`"},
		"unknown field":         {"kind: NodeBootstrap\nfoo: bar\n", "unknown field"},
		"http server":           {strings.Replace(string(data), "https://", "http://", 1), "want an https URL"},
		"registry without port": {strings.Replace(string(data), "172.29.0.1:5000", "172.29.0.1", 1), "want host:port"},
		// Files of an older fke carried a year-long kube-proxy certificate.
		"older file": {string(data) + "kubeProxyKubeconfig: kc\n", "write a new one with `fke node bootstrap-file`"},
	} {
		if _, err := ParseBootstrapFile([]byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}

// A bootstrap file of an fke without a registry (or an older one) still reads.
func TestBootstrapFileWithoutRegistry(t *testing.T) {
	f := BootstrapFile{
		Cluster: "default/demo", Pool: "metal", Server: "https://172.29.0.1:6443", CertificateAuthorityData: []byte("pem"),
		Token: "abcdef.0123456789abcdef", ClusterDNS: "10.96.0.10", PodCIDR: "10.112.0.0/12",
	}
	data, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "registry") {
		t.Errorf("an empty registry is written:\n%s", data)
	}
	if got, err := ParseBootstrapFile(data); err != nil || got.Registry != "" {
		t.Errorf("ParseBootstrapFile = %+v, %v", got, err)
	}
}

func TestNodeRegistry(t *testing.T) {
	if r, err := NodeRegistry("127.0.0.1:41235"); err != nil || r != "172.29.0.1:41235" {
		t.Errorf("NodeRegistry = %q, %v", r, err)
	}
	if r, err := NodeRegistry("127.0.0.1"); err == nil {
		t.Errorf("NodeRegistry without a port = %q, want an error", r)
	}
}

func TestDNSIPAndNodeServer(t *testing.T) {
	if ip, err := DNSIP("10.96.0.0/16"); err != nil || ip != "10.96.0.10" {
		t.Errorf("DNSIP = %q, %v", ip, err)
	}
	for in, want := range map[string]string{
		// The local runtime: on loopback, reached at the bridge's gateway.
		"https://127.0.0.1:41234": "https://172.29.0.1:41234",
		// The hosted runtime: a node port of the hosting cluster.
		"https://172.29.1.3:31443": "https://172.29.1.3:31443",
	} {
		if s, err := NodeServer(in); err != nil || s != want {
			t.Errorf("NodeServer(%s) = %q, %v; want %s", in, s, err, want)
		}
	}
	if _, err := NodeServer("https://172.29.1.3"); err == nil {
		t.Error("NodeServer accepted an endpoint without a port")
	}
}
