package supervisor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// WaitHTTPReady returns a Spec.Ready check that GETs url (with tlsConfig for
// https, nil for defaults) and succeeds on status 200 with body "ok", as
// kube-apiserver's /readyz and etcd's /health-style endpoints answer.
func WaitHTTPReady(url string, tlsConfig *tls.Config) func(ctx context.Context) error {
	return httpCheck(url, tlsConfig, true)
}

// WaitHTTPOK returns a Spec.Ready check that GETs url and succeeds on
// status 200 whatever the body, for servers whose health answers are not
// "ok": kube-proxy's /healthz (a JSON document) or a registry's /v2/ ("{}").
func WaitHTTPOK(url string, tlsConfig *tls.Config) func(ctx context.Context) error {
	return httpCheck(url, tlsConfig, false)
}

func httpCheck(url string, tlsConfig *tls.Config, wantOK bool) func(ctx context.Context) error {
	transport := &http.Transport{DisableKeepAlives: true}
	if tlsConfig != nil {
		transport.TLSClientConfig = tlsConfig.Clone()
	}
	client := &http.Client{Transport: transport}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("checking %s: %w", url, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("checking %s: %w", url, err)
		}
		body, readErr := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if err := resp.Body.Close(); err != nil && readErr == nil {
			readErr = err
		}
		if readErr != nil {
			return fmt.Errorf("checking %s: reading body: %w", url, readErr)
		}
		text := strings.TrimSpace(string(body))
		if resp.StatusCode != http.StatusOK || (wantOK && text != "ok") {
			return fmt.Errorf("checking %s: status %d, body %.200q", url, resp.StatusCode, text)
		}
		return nil
	}
}

// ClientTLS returns a TLS client configuration for readiness checks of a
// server whose certificate chains to caPEM, authenticating with the client
// certificate certPEM and key keyPEM (both nil for no client certificate).
func ClientTLS(caPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("building client TLS config: no CA certificate in PEM")
	}
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if certPEM != nil || keyPEM != nil {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("building client TLS config: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// WaitTCP returns a Spec.Ready check that succeeds once a TCP connection to
// addr ("host:port") is accepted.
func WaitTCP(addr string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("dialing %s: %w", addr, err)
		}
		if err := conn.Close(); err != nil {
			return fmt.Errorf("closing connection to %s: %w", addr, err)
		}
		return nil
	}
}

// FreePorts returns n distinct TCP ports that are free on 127.0.0.1 now.
// Another process may take one before the caller binds it.
func FreePorts(n int) ([]int, error) {
	if n < 0 {
		return nil, fmt.Errorf("finding free ports: negative count %d", n)
	}
	// Hold every listener until all ports are found, so none repeats.
	listeners := make([]net.Listener, 0, n)
	ports := make([]int, 0, n)
	var errs []error
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			errs = append(errs, fmt.Errorf("finding free ports: %w", err))
			break
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range listeners {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("releasing port: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ports, nil
}
