package nodejoin

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

func TestDecideProbe(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	lim := ProbeLimits{Grace: 2 * time.Second, Unreachable: 30 * time.Second}
	p := TokenProbe{Server: "https://172.29.0.1:6443", TokenID: "abcdef"}
	expired := p
	expired.Expires = now.Add(-time.Minute)
	valid := p
	valid.Expires = now.Add(time.Hour)
	reviews := schema.GroupResource{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}
	refused := apierrors.NewUnauthorized("Unauthorized")
	refusedConn := &url.Error{Op: "Post", URL: p.Server, Err: syscall.ECONNREFUSED}
	unknownCA := &url.Error{Op: "Post", URL: p.Server, Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}
	wrongName := &url.Error{Op: "Post", URL: p.Server, Err: x509.HostnameError{Certificate: &x509.Certificate{}, Host: "172.29.0.1"}}
	notTLS := &url.Error{Op: "Post", URL: p.Server, Err: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}}
	tests := []struct {
		name    string
		probe   TokenProbe
		err     error
		elapsed time.Duration
		retry   bool
		want    error // nil with retry false: accepted
		says    []string
	}{
		{"answered", p, nil, 0, false, nil, nil},
		{"answered though the file says expired (the server's clock rules)", expired, nil, 0, false, nil, nil},
		{"forbidden is authenticated", p, apierrors.NewForbidden(reviews, "", errors.New("no")), 0, false, nil, nil},
		{"no SelfSubjectReview API is authenticated", p, apierrors.NewNotFound(reviews, ""), 0, false, nil, nil},
		{"refused within the grace", valid, refused, time.Second, true, nil, nil},
		{"refused after the grace", valid, refused, 2 * time.Second, false, ErrTokenRefused,
			[]string{"abcdef", "https://172.29.0.1:6443", "401", "fke node bootstrap-file"}},
		{"refused, expired by the file", expired, refused, 0, false, ErrTokenExpired, []string{"abcdef", "expired at 2026-12-01T11:59:00Z"}},
		{"unreachable, expired by the file", expired, refusedConn, 0, false, ErrTokenExpired, nil},
		{"unknown CA", p, unknownCA, 0, false, ErrServerUntrusted, []string{"https://172.29.0.1:6443", "unknown authority"}},
		{"certificate for another name", p, wrongName, 0, false, ErrServerUntrusted, nil},
		{"not TLS", p, notTLS, 0, false, ErrServerUntrusted, nil},
		{"connection refused, early", p, refusedConn, 10 * time.Second, true, nil, nil},
		{"connection refused, too long", p, refusedConn, 30 * time.Second, false, ErrUnreachable, []string{"https://172.29.0.1:6443", "30s", "connection refused"}},
		{"503, early", p, apierrors.NewServiceUnavailable("starting"), time.Second, true, nil, nil},
		{"429, early", p, apierrors.NewTooManyRequests("slow down", 1), time.Second, true, nil, nil},
		{"500, too long", p, apierrors.NewInternalError(errors.New("etcd")), time.Minute, false, ErrUnreachable, nil},
		{"timeout, early", p, fmt.Errorf("post: %w", context.DeadlineExceeded), time.Second, true, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := DecideProbe(tt.probe, tt.err, now, tt.elapsed, lim)
			if d.Retry != tt.retry || !errors.Is(d.Err, tt.want) || (tt.want == nil) != (d.Err == nil) {
				t.Fatalf("DecideProbe = %+v, want retry %v, error %v", d, tt.retry, tt.want)
			}
			for _, s := range tt.says {
				if !strings.Contains(d.Err.Error(), s) {
					t.Errorf("error %q does not say %q", d.Err, s)
				}
			}
		})
	}
}

func TestCheckFileTokenTTL(t *testing.T) {
	for ttl, ok := range map[time.Duration]bool{
		0: false, -time.Hour: false, 9 * time.Minute: false, 10 * time.Minute: true,
		2 * time.Hour: true, 24 * time.Hour: true, 25 * time.Hour: false, 30 * 24 * time.Hour: false,
	} {
		if err := CheckFileTokenTTL(ttl); (err == nil) != ok {
			t.Errorf("CheckFileTokenTTL(%s) = %v, want ok %v", ttl, err, ok)
		}
	}
}

// CheckToken against API servers that refuse, cannot be trusted, or are
// not there: each ends within its bound with the reason.
func TestCheckToken(t *testing.T) {
	unauthorized := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
	}))
	defer unauthorized.Close()
	accepted := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1","status":{"userInfo":{"username":"system:bootstrap:abcdef"}}}`)
	}))
	defer accepted.Close()
	caOf := func(s *httptest.Server) []byte { return s.Certificate().Raw }
	cfgFor := func(host string, ca []byte) *rest.Config {
		c := &rest.Config{Host: host, BearerToken: "abcdef.0123456789abcdef"}
		if ca != nil {
			c.TLSClientConfig.CAData = pemCert(ca)
		}
		return c
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + l.Addr().String()
	l.Close()

	lim := ProbeLimits{Grace: 300 * time.Millisecond, Unreachable: time.Second, Interval: 50 * time.Millisecond}
	for _, tc := range []struct {
		name  string
		cfg   *rest.Config
		want  error
		limit time.Duration
	}{
		{"accepted", cfgFor(accepted.URL, caOf(accepted)), nil, time.Second},
		{"refused", cfgFor(unauthorized.URL, caOf(unauthorized)), ErrTokenRefused, 2 * time.Second},
		{"another CA", cfgFor(unauthorized.URL, otherCA(t)), ErrServerUntrusted, time.Second},
		{"nothing listens", cfgFor(closed, caOf(accepted)), ErrUnreachable, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := CheckToken(context.Background(), tc.cfg, TokenProbe{Server: tc.cfg.Host, TokenID: "abcdef"}, lim)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("CheckToken = %v, want %v", err, tc.want)
			}
			if took := time.Since(start); took > tc.limit {
				t.Errorf("CheckToken took %s, want at most %s", took, tc.limit)
			}
		})
	}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// otherCA returns a self-signed CA certificate (DER) that signed no server.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another cluster"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
