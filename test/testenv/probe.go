package testenv

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// Probe reads an API server every interval, as a client with one
// keep-alive connection would (dialling again after a request that timed
// out), and records how long it went unanswered.
type Probe struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	ok, fail int
	maxGap   time.Duration
	slowest  time.Duration // of the answered requests
	lastErr  error
}

// ProbeAPI starts probing GET path (e.g. /api/v1/namespaces/default) of the
// API server of cfg every interval, each request bounded by one second.
func ProbeAPI(cfg *rest.Config, path string, interval time.Duration) (*Probe, error) {
	return ProbeAPIWithin(cfg, path, interval, time.Second)
}

// ProbeAPIWithin is ProbeAPI with each request bounded by timeout: a
// request that takes longer counts as unanswered.
func ProbeAPIWithin(cfg *rest.Config, path string, interval, timeout time.Duration) (*Probe, error) {
	c := rest.CopyConfig(cfg)
	c.Timeout = timeout
	// A dialer of its own keeps client-go from sharing a cached transport
	// (and its connections) between clients of the same config, so that
	// each client made here has connections of its own.
	c.Dial = (&net.Dialer{Timeout: timeout}).DialContext
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Probe{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		lastOK := time.Now()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			sent := time.Now()
			err := get(hc, c.Host+path)
			now := time.Now()
			p.mu.Lock()
			if err == nil {
				p.ok++
				lastOK = now
				p.slowest = max(p.slowest, now.Sub(sent))
			} else {
				p.fail++
				p.lastErr = err
				// Unanswered since the last success.
				p.maxGap = max(p.maxGap, now.Sub(lastOK))
			}
			p.mu.Unlock()
			if err != nil {
				// The next request dials again, on a new transport, as a
				// client does after a timeout. The old connection, to a
				// server perhaps killed without closing it, may still
				// hold the stream that timed out (so it is not idle, and
				// would be used again) until HTTP/2's health check gives
				// it up, 15 s or more later, whatever the other replicas
				// answer.
				utilnet.CloseIdleConnectionsFor(hc.Transport)
				if fresh, ferr := rest.HTTPClientFor(c); ferr == nil {
					hc = fresh
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return p, nil
}

// Stop ends the probe and returns the longest time the API went
// unanswered (0 when every request succeeded), and a summary.
func (p *Probe) Stop() (time.Duration, string) {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf("%d requests answered (the slowest in %s), %d failed, longest gap %s", p.ok, p.slowest.Round(time.Millisecond), p.fail, p.maxGap.Round(time.Millisecond))
	if p.lastErr != nil {
		s += fmt.Sprintf(" (last error: %v)", p.lastErr)
	}
	return p.maxGap, s
}
