package nodejoin

import (
	"strings"
	"testing"
)

func TestBootstrapFile(t *testing.T) {
	good := BootstrapFile{
		Cluster: "default/demo", Pool: "metal", Server: "https://172.29.0.1:6443", CertificateAuthorityData: []byte("pem"),
		Token: "abcdef.0123456789abcdef", ClusterDNS: "10.96.0.10", PodCIDR: "10.112.0.0/12", KubeProxyKubeconfig: "kc",
	}
	data, err := good.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseBootstrapFile(data)
	if err != nil {
		t.Fatalf("round trip: %v", err)
	}
	if got.Token != good.Token || string(got.CertificateAuthorityData) != "pem" {
		t.Errorf("round trip = %+v", got)
	}
	for name, tc := range map[string]struct {
		data string
		want string
	}{
		"not a bootstrap file": {"kind: Pod\napiVersion: v1\n", "write it with `fke node bootstrap-file`"},
		"unknown field":        {"kind: NodeBootstrap\nfoo: bar\n", "unknown field"},
		"http server":          {strings.Replace(string(data), "https://", "http://", 1), "want an https URL"},
	} {
		if _, err := ParseBootstrapFile([]byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}

func TestDNSIPAndNodeServer(t *testing.T) {
	if ip, err := DNSIP("10.96.0.0/16"); err != nil || ip != "10.96.0.10" {
		t.Errorf("DNSIP = %q, %v", ip, err)
	}
	if s, err := NodeServer("https://127.0.0.1:41234"); err != nil || s != "https://172.29.0.1:41234" {
		t.Errorf("NodeServer = %q, %v", s, err)
	}
}
