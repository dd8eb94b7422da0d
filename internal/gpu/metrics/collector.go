package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"fke.dev/fke/internal/gpu/nvml"
)

// Sampler reads a GPU's current metrics.
type Sampler interface {
	Sample(ctx context.Context, uuid string) (nvml.Sample, error)
}

// XIDSource returns the last XID seen on a GPU (0 when none).
type XIDSource interface {
	LastXID(uuid string) uint64
}

var labelNames = []string{"gpu", "UUID", "device", "modelName", "Hostname", "pod", "namespace", "container"}

func desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labelNames, nil)
}

var (
	descUtil         = desc("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).")
	descMemCopy      = desc("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).")
	descFBUsed       = desc("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")
	descFBFree       = desc("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).")
	descTemp         = desc("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).")
	descPower        = desc("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).")
	descSMClock      = desc("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).")
	descXID          = desc("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")
	descScrapeErrors = prometheus.NewDesc("fke_gpu_scrape_errors", "Errors while collecting GPU metrics in this scrape, by source.", []string{"source"}, nil)
)

// Collector is a prometheus.Collector that samples every GPU on each scrape.
type Collector struct {
	Sampler  Sampler
	Devices  []nvml.Device
	Hostname string
	// XIDs and Owners are optional.
	XIDs   XIDSource
	Owners OwnerSource
	// Timeout bounds one scrape's NVML and pod-resources calls (5s).
	Timeout time.Duration
	Log     *slog.Logger
}

var _ prometheus.Collector = (*Collector)(nil)

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUtil, descMemCopy, descFBUsed, descFBFree, descTemp, descPower, descSMClock, descXID, descScrapeErrors} {
		ch <- d
	}
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var owners map[string][]Owner
	ownerErrs, sampleErrs := 0.0, 0.0
	if c.Owners != nil {
		o, err := c.Owners.Owners(ctx)
		if err != nil {
			ownerErrs++
			c.log().Warn("reading pod resources; metrics without pod labels", "err", err)
		}
		owners = o
	}
	for _, d := range c.Devices {
		holders := owners[d.UUID]
		for _, m := range d.MIGDevices {
			for _, o := range owners[m.UUID] {
				holders = appendOwner(holders, o)
			}
		}
		if len(holders) == 0 {
			holders = []Owner{{}}
		}
		s, err := c.Sampler.Sample(ctx, d.UUID)
		if err != nil {
			sampleErrs++
			c.log().Warn("sampling GPU", "uuid", d.UUID, "err", err)
		}
		var xid uint64
		if c.XIDs != nil {
			xid = c.XIDs.LastXID(d.UUID)
		}
		for _, o := range holders {
			lv := []string{fmt.Sprint(d.Index), d.UUID, fmt.Sprintf("nvidia%d", d.Index), d.Name, c.Hostname, o.Pod, o.Namespace, o.Container}
			gauge := func(desc *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, lv...)
			}
			gauge(descXID, float64(xid))
			if err != nil {
				continue
			}
			gauge(descUtil, float64(s.GPUUtil))
			gauge(descMemCopy, float64(s.MemCopyUtil))
			gauge(descFBUsed, float64(s.FBUsedMiB))
			gauge(descFBFree, float64(s.FBFreeMiB))
			gauge(descTemp, float64(s.TempC))
			gauge(descPower, s.PowerW)
			gauge(descSMClock, float64(s.SMClockMHz))
		}
	}
	ch <- prometheus.MustNewConstMetric(descScrapeErrors, prometheus.GaugeValue, ownerErrs, "podresources")
	ch <- prometheus.MustNewConstMetric(descScrapeErrors, prometheus.GaugeValue, sampleErrs, "nvml")
}

func (c *Collector) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// Handler returns an http.Handler serving c on /metrics and "ok" on /healthz.
func Handler(c prometheus.Collector) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("registering GPU collector: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux, nil
}

// Serve serves h on addr until ctx ends. ready, when not nil, receives the
// bound address once listening.
func Serve(ctx context.Context, addr string, h http.Handler, ready func(net.Addr)) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	if ready != nil {
		ready(l.Addr())
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("shutting down metrics server: %w", err)
		}
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serving metrics: %w", err)
	}
}
