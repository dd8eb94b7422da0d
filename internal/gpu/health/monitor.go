package health

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"fke.dev/fke/internal/gpu/nvml"
)

// Reporter makes the monitor's state visible outside the process (a Node
// condition and Events). Every method may be called repeatedly with the same
// arguments and must be idempotent in effect.
type Reporter interface {
	// MonitorFailed records that health monitoring is not working: the
	// subscription could not start or waiting for events failed.
	MonitorFailed(ctx context.Context, reason, message string) error
	// MonitorRunning records that health monitoring works (again).
	MonitorRunning(ctx context.Context) error
	// DeviceChanged records that the GPU with uuid changed to st.State.
	DeviceChanged(ctx context.Context, uuid string, st Status) error
}

// Options configures a Monitor. Zero fields take the defaults noted.
type Options struct {
	Policy Policy // DefaultPolicy()
	// Hold is the minimum time a device stays unhealthy after a critical event (2m).
	Hold time.Duration
	// ProbeInterval is how often unhealthy devices are re-probed (30s).
	ProbeInterval time.Duration
	// RetryBackoff is the first wait before re-subscribing after a failure (1s, doubling to 30s).
	RetryBackoff time.Duration
	Clock        clock.WithTicker // real clock
	Reporter     Reporter         // log only
	Log          *slog.Logger     // slog.Default()
}

// Monitor watches NVML events and re-probes unhealthy GPUs. A failed event
// wait marks no device unhealthy; it is reported through the Reporter and
// retried.
type Monitor struct {
	lib nvml.Interface
	o   Options

	mu      sync.Mutex
	tracker *Tracker
	subs    map[chan struct{}]struct{}
	failed  string
}

// NewMonitor tracks the GPUs with uuids, all Healthy at start.
func NewMonitor(lib nvml.Interface, uuids []string, o Options) *Monitor {
	if o.Policy.Version == "" {
		o.Policy = DefaultPolicy()
	}
	if o.Hold <= 0 {
		o.Hold = 2 * time.Minute
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 30 * time.Second
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Reporter == nil {
		o.Reporter = LogReporter{Log: o.Log}
	}
	return &Monitor{
		lib:     lib,
		o:       o,
		tracker: NewTracker(o.Policy, uuids, o.Hold, o.ProbeInterval, o.Clock.Now()),
		subs:    map[chan struct{}]struct{}{},
	}
}

// Run watches events and probes until ctx ends; it always returns nil after ctx ends.
func (m *Monitor) Run(ctx context.Context) error {
	m.o.Log.Info("GPU health monitor starting", "policy", m.o.Policy.Version, "hold", m.o.Hold, "probeInterval", m.o.ProbeInterval)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.probeLoop(ctx)
	}()
	m.eventLoop(ctx)
	wg.Wait()
	return nil
}

func (m *Monitor) eventLoop(ctx context.Context) {
	backoff := m.o.RetryBackoff
	for ctx.Err() == nil {
		stream, err := m.lib.Events(ctx)
		if err != nil {
			m.fail(ctx, "EventSubscriptionFailed", err)
		} else {
			m.running(ctx)
			backoff = m.o.RetryBackoff
			err = m.consume(ctx, stream)
			if cerr := stream.Close(); cerr != nil {
				m.o.Log.Warn("closing NVML event stream", "err", cerr)
			}
			if ctx.Err() != nil {
				return
			}
			m.fail(ctx, "EventWaitFailed", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-m.o.Clock.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (m *Monitor) consume(ctx context.Context, stream nvml.EventStream) error {
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			return err
		}
		m.handle(ctx, ev)
	}
}

func (m *Monitor) handle(ctx context.Context, ev nvml.Event) {
	m.mu.Lock()
	v, changed := m.tracker.Observe(ev, m.o.Clock.Now())
	st, known := m.tracker.Status(ev.UUID)
	m.mu.Unlock()
	m.o.Log.Info("GPU event", "uuid", ev.UUID, "kind", ev.Kind, "xid", ev.XID, "class", v.Class, "action", v.Action, "policy", m.o.Policy.Version, "knownDevice", known)
	if changed {
		m.notify()
		if err := m.o.Reporter.DeviceChanged(ctx, ev.UUID, st); err != nil {
			m.o.Log.Warn("reporting device health", "uuid", ev.UUID, "err", err)
		}
	}
}

func (m *Monitor) probeLoop(ctx context.Context) {
	t := m.o.Clock.NewTicker(m.o.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		m.ProbeDue(ctx)
	}
}

// ProbeDue probes the unhealthy devices that are due now and applies the results.
func (m *Monitor) ProbeDue(ctx context.Context) {
	m.mu.Lock()
	due := m.tracker.DueProbes(m.o.Clock.Now())
	m.mu.Unlock()
	for _, u := range due {
		perr := m.lib.Probe(ctx, u)
		m.mu.Lock()
		changed := m.tracker.ProbeResult(u, perr, m.o.Clock.Now())
		st, _ := m.tracker.Status(u)
		m.mu.Unlock()
		m.o.Log.Info("GPU re-probed", "uuid", u, "usable", perr == nil, "err", perr, "state", st.State)
		if changed {
			m.notify()
			if err := m.o.Reporter.DeviceChanged(ctx, u, st); err != nil {
				m.o.Log.Warn("reporting device health", "uuid", u, "err", err)
			}
		}
	}
}

func (m *Monitor) fail(ctx context.Context, reason string, err error) {
	if err == nil {
		err = errors.New("unknown error")
	}
	m.mu.Lock()
	m.failed = reason + ": " + err.Error()
	m.mu.Unlock()
	m.o.Log.Error("GPU health monitor failed", "reason", reason, "err", err)
	if rerr := m.o.Reporter.MonitorFailed(ctx, reason, err.Error()); rerr != nil {
		m.o.Log.Warn("reporting health monitor failure", "err", rerr)
	}
}

func (m *Monitor) running(ctx context.Context) {
	m.mu.Lock()
	m.failed = ""
	m.mu.Unlock()
	if err := m.o.Reporter.MonitorRunning(ctx); err != nil {
		m.o.Log.Warn("reporting health monitor running", "err", err)
	}
}

// Failure returns the current monitor failure ("" when running).
func (m *Monitor) Failure() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed
}

// Healthy reports whether the GPU with uuid is usable; unknown UUIDs are healthy.
func (m *Monitor) Healthy(uuid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.tracker.Status(uuid)
	return !ok || s.State == Healthy
}

// LastXID returns the last XID seen on the GPU (0 when none).
func (m *Monitor) LastXID(uuid string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, _ := m.tracker.Status(uuid)
	return s.LastXID
}

// Snapshot returns every device's record.
func (m *Monitor) Snapshot() map[string]Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tracker.Snapshot()
}

// Subscribe returns a channel that receives (coalesced) after any health
// change, and a function that ends the subscription.
func (m *Monitor) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.mu.Unlock()
	}
}

func (m *Monitor) notify() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ch := range m.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// LogReporter reports through slog only, for agents without a Node API.
type LogReporter struct{ Log *slog.Logger }

var _ Reporter = LogReporter{}

func (r LogReporter) MonitorFailed(_ context.Context, reason, message string) error {
	r.Log.Error("GPUHealthMonitorFailed", "reason", reason, "message", message)
	return nil
}

func (r LogReporter) MonitorRunning(context.Context) error { return nil }

func (r LogReporter) DeviceChanged(_ context.Context, uuid string, st Status) error {
	r.Log.Warn("GPU health changed", "uuid", uuid, "state", st.State, "reason", st.Reason, "class", st.Class)
	return nil
}
