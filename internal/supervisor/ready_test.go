package supervisor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestWaitHTTPReady(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			_, _ = io.WriteString(w, "ok\n")
		case "/notok":
			_, _ = io.WriteString(w, "[-]etcd failed")
		case "/json":
			// As kube-proxy's /healthz answers.
			_, _ = io.WriteString(w, `{"healthy":true,"nodeEligible":true}`)
		case "/json-unhealthy":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"healthy":false}`)
		default:
			http.Error(w, "ok", http.StatusInternalServerError)
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted case logs a handshake error
	srv.StartTLS()
	defer srv.Close()
	tlsConfig := srv.Client().Transport.(*http.Transport).TLSClientConfig

	tests := []struct {
		name    string
		url     string
		anyBody bool // WaitHTTPOK, not WaitHTTPReady
		wantErr bool
	}{
		{"ok", srv.URL + "/readyz", false, false},
		{"body not ok", srv.URL + "/notok", false, true},
		{"status 500", srv.URL + "/fail", false, true},
		{"untrusted server", srv.URL + "/readyz", false, true},
		{"a JSON body is not ok", srv.URL + "/json", false, true},
		{"any body: JSON", srv.URL + "/json", true, false},
		{"any body: ok", srv.URL + "/readyz", true, false},
		{"any body: status 503", srv.URL + "/json-unhealthy", true, true},
		{"any body: untrusted server", srv.URL + "/json", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tlsConfig
			if strings.HasSuffix(tt.name, "untrusted server") {
				cfg = nil
			}
			check := WaitHTTPReady
			if tt.anyBody {
				check = WaitHTTPOK
			}
			err := check(tt.url, cfg)(context.Background())
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

func TestFreePortsAndWaitTCP(t *testing.T) {
	ports, err := FreePorts(5)
	if err != nil {
		t.Fatalf("FreePorts: %v", err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Errorf("ports %v: bad or repeated %d", ports, p)
		}
		seen[p] = true
	}
	if len(ports) != 5 {
		t.Fatalf("got %d ports", len(ports))
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	if err := WaitTCP(addr)(context.Background()); err == nil {
		t.Error("WaitTCP succeeded before anything listens")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port %d from FreePorts is not free: %v", ports[0], err)
	}
	defer func() { _ = l.Close() }()
	if err := WaitTCP(addr)(context.Background()); err != nil {
		t.Errorf("WaitTCP: %v", err)
	}
	if _, err := FreePorts(-1); err == nil {
		t.Error("FreePorts(-1) succeeded")
	}
}

func TestClientTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no client certificate", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	// The test server's own certificate doubles as a client certificate.
	certPEM, keyPEM := testCertPEM(t, srv)

	withCert, err := ClientTLS(caPEM, certPEM, keyPEM)
	if err != nil {
		t.Fatalf("ClientTLS: %v", err)
	}
	if err := WaitHTTPReady(srv.URL, withCert)(context.Background()); err != nil {
		t.Errorf("with client certificate: %v", err)
	}
	withoutCert, err := ClientTLS(caPEM, nil, nil)
	if err != nil {
		t.Fatalf("ClientTLS without client certificate: %v", err)
	}
	if err := WaitHTTPReady(srv.URL, withoutCert)(context.Background()); err == nil {
		t.Error("without client certificate: ready, want 401")
	}
	if _, err := ClientTLS([]byte("nope"), nil, nil); err == nil {
		t.Error("ClientTLS with bad CA succeeded")
	}
	if _, err := ClientTLS(caPEM, certPEM, []byte("nope")); err == nil {
		t.Error("ClientTLS with bad key succeeded")
	}
}

func testCertPEM(t *testing.T, srv *httptest.Server) (certPEM, keyPEM []byte) {
	t.Helper()
	cert := srv.TLS.Certificates[0]
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func TestReadyPollDelay(t *testing.T) {
	tests := []struct {
		elapsed, want time.Duration
	}{
		{0, readyPollInterval},
		{readyFastPollFor - time.Millisecond, readyPollInterval},
		{readyFastPollFor, readySlowPollInterval},
		{time.Hour, readySlowPollInterval},
	}
	for _, tt := range tests {
		if got := readyPollDelay(tt.elapsed); got != tt.want {
			t.Errorf("readyPollDelay(%v) = %v, want %v", tt.elapsed, got, tt.want)
		}
	}
}
