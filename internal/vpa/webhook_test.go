package vpa

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/pki"
)

func TestClientAllowed(t *testing.T) {
	chain := func(cn string) [][]*x509.Certificate {
		return [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: cn}}}}
	}
	allowed := []string{"fke:kube-apiserver-webhook-client", "fke-manager"}
	tests := []struct {
		name  string
		state *tls.ConnectionState
		code  int
	}{
		{"plain HTTP", nil, http.StatusUnauthorized},
		{"no verified certificate", &tls.ConnectionState{}, http.StatusUnauthorized},
		{"the API server", &tls.ConnectionState{VerifiedChains: chain("fke:kube-apiserver-webhook-client")}, 0},
		{"fke-manager", &tls.ConnectionState{VerifiedChains: chain("fke-manager")}, 0},
		{"another user of the CA", &tls.ConnectionState{VerifiedChains: chain("kubernetes-admin")}, http.StatusForbidden},
		{"a prefix of an allowed name", &tls.ConnectionState{VerifiedChains: chain("fke")}, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, msg := clientAllowed(tt.state, allowed)
			if code != tt.code {
				t.Errorf("code %d (%s), want %d", code, msg, tt.code)
			}
			if code != 0 && msg == "" {
				t.Error("refused without a reason")
			}
		})
	}
}

func TestWebhookValidate(t *testing.T) {
	ok := Webhook{Address: "127.0.0.1:8443", CertFile: "c", KeyFile: "k", ClientCAFile: "ca", AllowedClients: []string{"x"}}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	inPod := ok
	inPod.Address = "0.0.0.0:8443"
	if err := inPod.validate(); err != nil {
		t.Errorf("every address of its pod: %v", err)
	}
	tests := []struct {
		name   string
		modify func(*Webhook)
		want   string
	}{
		{"every interface", func(w *Webhook) { w.Address = ":8443" }, "loopback"},
		{"a routable address", func(w *Webhook) { w.Address = "172.29.0.1:8443" }, "loopback"},
		{"a name", func(w *Webhook) { w.Address = "localhost:8443" }, "loopback"},
		{"any port", func(w *Webhook) { w.Address = "127.0.0.1:0" }, "no port"},
		{"no port", func(w *Webhook) { w.Address = "127.0.0.1" }, "missing port"},
		{"no client CA", func(w *Webhook) { w.ClientCAFile = "" }, "client CA"},
		{"no clients", func(w *Webhook) { w.AllowedClients = nil }, "allowed webhook clients"},
		{"an empty client", func(w *Webhook) { w.AllowedClients = []string{"x", ""} }, "allowed webhook clients"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := ok
			tt.modify(&w)
			if err := w.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one about %q", err, tt.want)
			}
		})
	}
}

// TestWebhookTLS serves a handler with the webhook's TLS configuration and
// authorization and calls it as the callers an fke cluster has.
func TestWebhookTLS(t *testing.T) {
	b, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{ClusterName: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{ClusterName: "other"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w := Webhook{
		Address:        "127.0.0.1:1",
		CertFile:       filepath.Join(dir, "tls.crt"),
		KeyFile:        filepath.Join(dir, "tls.key"),
		ClientCAFile:   filepath.Join(dir, "ca.crt"),
		AllowedClients: addons.VPAWebhookClients,
	}
	for name, data := range map[string][]byte{w.CertFile: b[pki.VPAWebhookCertFile], w.KeyFile: b[pki.VPAWebhookKeyFile], w.ClientCAFile: b[pki.CACertFile]} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := w.tlsConfig()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(Authorize(w.AllowedClients, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		io.WriteString(rw, "admitted")
	})))
	srv.TLS = cfg
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are what this test makes
	srv.StartTLS()
	defer srv.Close()

	call := func(bundle pki.Bundle, client string) (int, error) {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(b[pki.CACertFile])
		tc := &tls.Config{RootCAs: roots, ServerName: pki.VPAWebhookServiceName, MinVersion: tls.VersionTLS12}
		if client != "" {
			kp, err := tls.X509KeyPair(bundle[pki.CertFile(client)], bundle[pki.KeyFile(client)])
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{kp}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := c.Get(srv.URL)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}
	tests := []struct {
		name          string
		bundle        pki.Bundle
		client        string
		code          int
		handshakeFail bool
	}{
		{"the API server's webhook client", b, pki.APIServerWebhookClient, http.StatusOK, false},
		{"fke-manager", b, pki.Manager, http.StatusOK, false},
		{"no client certificate", b, "", 0, true},
		{"the API server's webhook client of another cluster", other, pki.APIServerWebhookClient, 0, true},
		{"the VPA's own client certificate", b, pki.VPAClient, http.StatusForbidden, false},
		{"the cluster's admin", b, pki.Admin, http.StatusForbidden, false},
		{"a serving certificate of the CA", b, pki.MetricsServer, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, err := call(tt.bundle, tt.client)
			if tt.handshakeFail {
				if err == nil || !strings.Contains(err.Error(), "tls: ") {
					t.Fatalf("status %d, err %v: want a refused TLS handshake", code, err)
				}
				return
			}
			if err != nil || code != tt.code {
				t.Fatalf("status %d, err %v: want %d", code, err, tt.code)
			}
		})
	}
}

// TestVersion checks that the VPA fke reports is the one go.mod pins.
func TestVersion(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := "\tk8s.io/autoscaler/vertical-pod-autoscaler " + addons.VPAVersion + "\n"
	if !strings.Contains(string(data), want) {
		t.Errorf("go.mod does not require k8s.io/autoscaler/vertical-pod-autoscaler %s (addons.VPAVersion)", addons.VPAVersion)
	}
}
