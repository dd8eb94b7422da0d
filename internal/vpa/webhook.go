package vpa

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/metrics"
)

// Webhook is how the admission controller is served: HTTPS on Address, a
// loopback address beside the API server, or the unspecified address
// (0.0.0.0) in a pod of its own, whose network namespace holds nothing
// else; with the certificate in CertFile and KeyFile; every
// caller must present a client certificate that ClientCAFile's CA signed
// for client authentication (else the TLS handshake fails) whose common
// name is one of AllowedClients (else 403). "/" is the webhook,
// "/healthz" answers "ok" while the recommender and the updater keep
// working. Nothing else listens.
type Webhook struct {
	Address                         string
	CertFile, KeyFile, ClientCAFile string
	AllowedClients                  []string
}

func (w Webhook) validate() error {
	var errs []error
	host, port, err := net.SplitHostPort(w.Address)
	if err != nil {
		errs = append(errs, fmt.Errorf("webhook address %q: %w", w.Address, err))
	} else if ip := net.ParseIP(host); ip == nil || !(ip.IsLoopback() || ip.IsUnspecified()) {
		errs = append(errs, fmt.Errorf("webhook address %q: the host must be a loopback IP address, or 0.0.0.0 in a pod of its own", w.Address))
	} else if port == "" || port == "0" {
		errs = append(errs, fmt.Errorf("webhook address %q: no port", w.Address))
	}
	for _, f := range []struct{ what, file string }{{"certificate", w.CertFile}, {"key", w.KeyFile}, {"client CA", w.ClientCAFile}} {
		if f.file == "" {
			errs = append(errs, fmt.Errorf("no webhook %s file", f.what))
		}
	}
	if len(w.AllowedClients) == 0 || slices.Contains(w.AllowedClients, "") {
		errs = append(errs, fmt.Errorf("allowed webhook clients %q: name at least one, none empty", w.AllowedClients))
	}
	return errors.Join(errs...)
}

// tlsConfig reads the files into the server's TLS configuration.
func (w Webhook) tlsConfig() (*tls.Config, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("webhook TLS: %w", err)
		}
		return b, nil
	}
	cert, err := read(w.CertFile)
	if err != nil {
		return nil, err
	}
	key, err := read(w.KeyFile)
	if err != nil {
		return nil, err
	}
	ca, err := read(w.ClientCAFile)
	if err != nil {
		return nil, err
	}
	return ServerTLS(cert, key, ca)
}

// ServerTLS is the webhook's TLS configuration: the serving key pair,
// TLS 1.2 or later, and a client certificate signed by clientCA (PEM)
// required of every caller.
func ServerTLS(certPEM, keyPEM, clientCAPEM []byte) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("webhook TLS: serving key pair: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(clientCAPEM) {
		return nil, errors.New("webhook TLS: no certificate in the client CA file")
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// Authorize passes to next only requests whose verified client
// certificate's common name is one of allowed; others get 401 (no verified
// certificate: only possible without ServerTLS) or 403.
func Authorize(allowed []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code, msg := clientAllowed(r.TLS, allowed); code != 0 {
			http.Error(w, msg, code)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// clientAllowed decides on a connection's client: 0 when allowed, else
// the HTTP status and why.
func clientAllowed(state *tls.ConnectionState, allowed []string) (int, string) {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return http.StatusUnauthorized, "a client certificate is required"
	}
	cn := state.VerifiedChains[0][0].Subject.CommonName
	if !slices.Contains(allowed, cn) {
		return http.StatusForbidden, fmt.Sprintf("client %q may not call the VPA webhook", cn)
	}
	return 0, ""
}

// healthy answers "ok" while every check passes, else 500 with the first
// failure.
func healthy(checks ...*metrics.HealthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, c := range checks {
			rec := httptest.NewRecorder()
			c.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK {
				http.Error(w, strings.TrimSpace(rec.Body.String()), http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprint(w, "ok")
	})
}

// serve listens on w.Address and serves the webhook and the health check
// until ctx ends.
func (w Webhook) serve(ctx context.Context, cfg *tls.Config, admission *logic.AdmissionServer, health http.Handler, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/", http.HandlerFunc(admission.Serve))
	mux.Handle("/healthz", health)
	srv := &http.Server{
		Handler:           Authorize(w.AllowedClients, mux),
		TLSConfig:         cfg,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", w.Address)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	log.Info("admission webhook serves", "address", ln.Addr().String(), "clients", w.AllowedClients)
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-done:
		return fmt.Errorf("webhook: %w", err)
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil {
			return fmt.Errorf("webhook: shutting down: %w", err)
		}
		return ctx.Err()
	}
}
