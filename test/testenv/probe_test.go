package testenv

import (
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

var errNotYet = errors.New("not yet")

// blackHoleProxy forwards TCP connections to target. blackHole silences
// the connections it holds: from then on they swallow every byte in both
// directions without closing, as a connection to a server whose network
// went away does. Connections accepted later are forwarded.
type blackHoleProxy struct {
	ln       net.Listener
	target   string
	accepted atomic.Int32

	mu   sync.Mutex
	held []*atomic.Bool // each held connection's "silenced"
}

func newBlackHoleProxy(t *testing.T, target string) *blackHoleProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackHoleProxy{ln: ln, target: target}
	var conns []net.Conn
	var connsMu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, c, up)
			connsMu.Unlock()
			silenced := new(atomic.Bool)
			p.mu.Lock()
			p.held = append(p.held, silenced)
			p.mu.Unlock()
			go pipe(up, c, silenced)
			go pipe(c, up, silenced)
		}
	}()
	return p
}

// pipe copies src to dst until src ends, dropping what it reads once
// silenced.
func pipe(dst, src net.Conn, silenced *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if !silenced.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

// blackHole silences every connection accepted so far.
func (p *blackHoleProxy) blackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.held {
		s.Store(true)
	}
}

// TestProbeDialsAgainAfterATimeout checks the probe's contract: a request
// that times out on a connection that went silent is followed by one on a
// new connection, so the API counts as answered again within about a
// second (the request timeout), not once HTTP/2's health check gives the
// old connection up.
func TestProbeDialsAgainAfterATimeout(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	proxy := newBlackHoleProxy(t, srv.Listener.Addr().String())

	cfg := &rest.Config{Host: "https://" + proxy.ln.Addr().String()}
	cfg.TLSClientConfig.CAData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	probe, err := ProbeAPI(cfg, "/", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, "the probe's first answers", func() error {
		probe.mu.Lock()
		defer probe.mu.Unlock()
		if probe.ok < 3 {
			return errNotYet
		}
		return nil
	})
	if n := proxy.accepted.Load(); n != 1 {
		t.Fatalf("%d connections before the cut, want 1 (kept alive)", n)
	}
	proxy.blackHole()
	Eventually(t, 10*time.Second, "answers after the cut", func() error {
		probe.mu.Lock()
		defer probe.mu.Unlock()
		if probe.fail == 0 || probe.ok < 6 {
			return errNotYet
		}
		return nil
	})
	gap, summary := probe.Stop()
	t.Log(summary)
	if gap > 3*time.Second {
		t.Errorf("unanswered for %s after one connection went silent, want about the one-second timeout", gap)
	}
	if n := proxy.accepted.Load(); n < 2 {
		t.Errorf("%d connections, want a new one after the timeout", n)
	}
}
