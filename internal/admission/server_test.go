package admission

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

func TestEnsureCertificates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "webhook-pki")
	ca, err := EnsureCertificates(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{CACertFile, caKeyFile, TLSCertFile, tlsKeyFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	leaf, _ := os.ReadFile(filepath.Join(dir, TLSCertFile))

	// Stable: a second start keeps the CA (the installed caBundle) and the certificate.
	again, err := EnsureCertificates(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	leaf2, _ := os.ReadFile(filepath.Join(dir, TLSCertFile))
	if !bytes.Equal(ca, again) || !bytes.Equal(leaf, leaf2) {
		t.Fatal("certificates changed on a second call")
	}

	// The serving certificate verifies for 127.0.0.1 against the returned CA.
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, TLSCertFile), filepath.Join(dir, tlsKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatal("CA PEM does not parse")
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: roots}); err != nil {
		t.Fatalf("serving certificate: %v", err)
	}

	// Another host: a new serving certificate from the same CA.
	if _, err := EnsureCertificates(dir, "localhost"); err != nil {
		t.Fatal(err)
	}
	leaf3, _ := os.ReadFile(filepath.Join(dir, TLSCertFile))
	if bytes.Equal(leaf, leaf3) {
		t.Fatal("serving certificate not reissued for a new host")
	}
	// A broken CA file is replaced.
	if err := os.WriteFile(filepath.Join(dir, CACertFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ca2, err := EnsureCertificates(dir, "127.0.0.1"); err != nil || bytes.Equal(ca2, ca) {
		t.Fatalf("a broken CA was not replaced: %v", err)
	}
}

func TestConfiguration(t *testing.T) {
	cfg := Configuration("https://127.0.0.1:9443", []byte("CA"))
	if len(cfg.Webhooks) != 2 {
		t.Fatalf("%d webhooks, want 2", len(cfg.Webhooks))
	}
	for _, h := range cfg.Webhooks {
		if *h.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("%s: failurePolicy %s, want Fail", h.Name, *h.FailurePolicy)
		}
		if string(h.ClientConfig.CABundle) != "CA" || h.ClientConfig.URL == nil {
			t.Errorf("%s: client config %+v", h.Name, h.ClientConfig)
		}
	}
	if got := *cfg.Webhooks[1].ClientConfig.URL; got != "https://127.0.0.1:9443"+PathNodePool {
		t.Errorf("node pool URL %s", got)
	}
}
