package gpumetrics

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"
)

// Agents scrapes the metrics endpoint of every running fke-gpu-agent pod
// (local GPU nodes) at a fixed interval and keeps the latest per-pod
// values (Scraped). Agent pods are on the pod network, which the host
// routes to, so the adapter beside the control plane reaches them at
// their pod IP.
type Agents struct {
	// Lister lists the agent pods: Namespace and Selector pick them, Port is
	// their metrics port.
	Lister    corelisters.PodLister
	Namespace string
	Selector  labels.Selector
	Port      int
	// Interval between scrapes (default 5 s); Timeout bounds one agent's
	// answer (default 3 s).
	Interval, Timeout time.Duration
	Client            *http.Client
	Clock             clock.Clock
	Log               *slog.Logger

	mu   sync.Mutex
	pods map[PodKey]Values
	at   time.Time
}

var _ Scraped = (*Agents)(nil)

// Pods implements Scraped.
func (a *Agents) Pods() (map[PodKey]Values, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pods, a.at
}

// Run scrapes until ctx ends.
func (a *Agents) Run(ctx context.Context) {
	interval := a.Interval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	for {
		a.ScrapeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-a.Clock.After(interval):
		}
	}
}

// ScrapeOnce scrapes every running agent once and replaces the values.
// An agent that does not answer is logged and leaves its pods out (their
// HPAs see them without metrics, as with any missing scrape).
func (a *Agents) ScrapeOnce(ctx context.Context) {
	agents, err := a.Lister.Pods(a.Namespace).List(a.Selector)
	if err != nil {
		a.Log.Warn("listing GPU agent pods", "err", err)
		return
	}
	var mu sync.Mutex
	out := map[PodKey]Values{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, pod := range agents {
		if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
			continue
		}
		url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(a.Port)) + "/metrics"
		node := pod.Spec.NodeName
		g.Go(func() error {
			got, err := a.scrape(gctx, url)
			if err != nil {
				a.Log.Warn("scraping GPU agent", "node", node, "url", url, "err", err)
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			for k, gpus := range got {
				out[k] = AggregatePod(gpus)
			}
			return nil
		})
	}
	_ = g.Wait() // the goroutines return no error
	a.mu.Lock()
	a.pods, a.at = out, a.Clock.Now()
	a.mu.Unlock()
}

func (a *Agents) scrape(ctx context.Context, url string) (map[PodKey]PerGPU, error) {
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	client := a.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return ParseAgent(resp.Body)
}
