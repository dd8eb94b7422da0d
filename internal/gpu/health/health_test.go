package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	clocktesting "k8s.io/utils/clock/testing"

	"fke.dev/fke/internal/gpu/nvml"
)

func TestPolicyClassify(t *testing.T) {
	p := DefaultPolicy()
	tests := []struct {
		ev     nvml.Event
		class  Class
		action Action
	}{
		{nvml.Event{Kind: nvml.EventXID, XID: 13}, ClassApplication, ActionIgnore},
		{nvml.Event{Kind: nvml.EventXID, XID: 31}, ClassApplication, ActionIgnore},
		{nvml.Event{Kind: nvml.EventXID, XID: 43}, ClassApplication, ActionIgnore},
		{nvml.Event{Kind: nvml.EventXID, XID: 45}, ClassApplication, ActionIgnore},
		{nvml.Event{Kind: nvml.EventXID, XID: 68}, ClassApplication, ActionIgnore},
		{nvml.Event{Kind: nvml.EventXID, XID: 109}, ClassApplication, ActionIgnore},
		{nvml.Event{Kind: nvml.EventXID, XID: 48}, ClassReset, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventXID, XID: 63}, ClassReset, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventXID, XID: 64}, ClassReboot, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventXID, XID: 74}, ClassReset, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventXID, XID: 79}, ClassReboot, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventXID, XID: 92}, ClassReset, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventXID, XID: 94}, ClassReset, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventXID, XID: 95}, ClassReset, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventXID, XID: 119}, ClassReset, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventXID, XID: 120}, ClassReset, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventXID, XID: 999}, ClassUnknown, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventECCDoubleBit}, ClassReset, ActionUnhealthy},
		{nvml.Event{Kind: nvml.EventECCSingleBit}, ClassCorrectable, ActionIgnore},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s-%d", tc.ev.Kind, tc.ev.XID), func(t *testing.T) {
			v := p.Classify(tc.ev)
			if v.Class != tc.class || v.Action != tc.action {
				t.Errorf("got %+v, want %s/%s", v, tc.class, tc.action)
			}
		})
	}
	q := p.WithIgnored(79)
	if v := q.Classify(nvml.Event{Kind: nvml.EventXID, XID: 79}); v.Action != ActionIgnore {
		t.Errorf("WithIgnored(79): %+v", v)
	}
	if q.Version == p.Version || p.Classify(nvml.Event{Kind: nvml.EventXID, XID: 79}).Action != ActionUnhealthy {
		t.Error("WithIgnored changed the original policy or kept its version")
	}
}

func TestTrackerTransitions(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	hold, probe := time.Minute, 10*time.Second
	xid := func(uuid string, x uint64) nvml.Event { return nvml.Event{UUID: uuid, Kind: nvml.EventXID, XID: x} }
	type step struct {
		at       time.Duration
		event    *nvml.Event
		probe    string // uuid to probe
		probeErr error
		changed  bool
		wantA    State
		wantB    State
	}
	ev := func(e nvml.Event) *nvml.Event { return &e }
	tests := []struct {
		name  string
		steps []step
	}{
		{"application XID ignored", []step{
			{at: 0, event: ev(xid("a", 13)), wantA: Healthy, wantB: Healthy},
		}},
		{"reset XID marks only that GPU", []step{
			{at: 0, event: ev(xid("a", 48)), changed: true, wantA: Unhealthy, wantB: Healthy},
		}},
		{"unknown device changes nothing", []step{
			{at: 0, event: ev(xid("zzz", 79)), wantA: Healthy, wantB: Healthy},
			{at: 0, event: ev(xid("", 79)), wantA: Healthy, wantB: Healthy},
		}},
		{"probe before hold does not recover", []step{
			{at: 0, event: ev(xid("a", 79)), changed: true, wantA: Unhealthy, wantB: Healthy},
			{at: 30 * time.Second, probe: "a", wantA: Unhealthy, wantB: Healthy},
		}},
		{"probe after hold recovers", []step{
			{at: 0, event: ev(xid("a", 79)), changed: true, wantA: Unhealthy, wantB: Healthy},
			{at: time.Minute, probe: "a", changed: true, wantA: Healthy, wantB: Healthy},
		}},
		{"failed probe keeps unhealthy, later probe recovers", []step{
			{at: 0, event: ev(xid("a", 79)), changed: true, wantA: Unhealthy, wantB: Healthy},
			{at: time.Minute, probe: "a", probeErr: errors.New("GPU is lost"), wantA: Unhealthy, wantB: Healthy},
			{at: 2 * time.Minute, probe: "a", changed: true, wantA: Healthy, wantB: Healthy},
		}},
		{"second critical event restarts hold", []step{
			{at: 0, event: ev(xid("a", 48)), changed: true, wantA: Unhealthy, wantB: Healthy},
			{at: 50 * time.Second, event: ev(xid("a", 48)), wantA: Unhealthy, wantB: Healthy},
			{at: 70 * time.Second, probe: "a", wantA: Unhealthy, wantB: Healthy},
			{at: 110 * time.Second, probe: "a", changed: true, wantA: Healthy, wantB: Healthy},
		}},
		{"ECC double bit", []step{
			{at: 0, event: ev(nvml.Event{UUID: "b", Kind: nvml.EventECCDoubleBit}), changed: true, wantA: Healthy, wantB: Unhealthy},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(DefaultPolicy(), []string{"a", "b"}, hold, probe, t0)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				var changed bool
				if s.event != nil {
					_, changed = tr.Observe(*s.event, now)
				} else {
					changed = tr.ProbeResult(s.probe, s.probeErr, now)
				}
				a, _ := tr.Status("a")
				b, _ := tr.Status("b")
				if changed != s.changed || a.State != s.wantA || b.State != s.wantB {
					t.Fatalf("step %d: changed=%v a=%s b=%s, want %v %s %s", i, changed, a.State, b.State, s.changed, s.wantA, s.wantB)
				}
			}
		})
	}
}

func TestTrackerDueProbes(t *testing.T) {
	t0 := time.Unix(0, 0)
	tr := NewTracker(DefaultPolicy(), []string{"a", "b", "c"}, time.Minute, 10*time.Second, t0)
	tr.Observe(nvml.Event{UUID: "b", Kind: nvml.EventXID, XID: 79}, t0)
	tr.Observe(nvml.Event{UUID: "a", Kind: nvml.EventXID, XID: 79}, t0.Add(30*time.Second))
	if got := tr.DueProbes(t0.Add(59 * time.Second)); len(got) != 0 {
		t.Errorf("due early: %v", got)
	}
	if got := fmt.Sprint(tr.DueProbes(t0.Add(time.Minute))); got != "[b]" {
		t.Errorf("due at 1m: %s", got)
	}
	if got := fmt.Sprint(tr.DueProbes(t0.Add(2 * time.Minute))); got != "[a b]" {
		t.Errorf("due at 2m: %s", got)
	}
	if s, _ := tr.Status("a"); s.LastXID != 79 || s.Reason != "XID79" || s.Class != ClassReboot {
		t.Errorf("status %+v", s)
	}
}

type recorder struct {
	mu      sync.Mutex
	failed  []string
	running int
	changes []string
}

func (r *recorder) MonitorFailed(_ context.Context, reason, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, reason)
	return nil
}
func (r *recorder) MonitorRunning(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running++
	return nil
}
func (r *recorder) DeviceChanged(_ context.Context, uuid string, st Status) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, uuid+"="+string(st.State))
	return nil
}
func (r *recorder) snapshot() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.failed...), r.running
}

func eventually(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startMonitor(t *testing.T, m *nvml.Mock, fc *clocktesting.FakeClock, rec *recorder) (*Monitor, context.CancelFunc) {
	t.Helper()
	mon := NewMonitor(m, m.UUIDs(), Options{Hold: time.Minute, ProbeInterval: 10 * time.Second, RetryBackoff: time.Second, Clock: fc, Reporter: rec})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mon.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return mon, cancel
}

func TestMonitorXIDAndRecovery(t *testing.T) {
	m, err := nvml.NewMock("dgxh100", "n")
	if err != nil {
		t.Fatal(err)
	}
	fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rec := &recorder{}
	mon, _ := startMonitor(t, m, fc, rec)
	eventually(t, "event stream open", 2*time.Second, func() bool { return m.OpenEventStreams() == 1 })
	changes, cancel := mon.Subscribe()
	defer cancel()

	bad, other := m.UUIDs()[4], m.UUIDs()[5]
	if err := m.InjectXID(bad, 43); err != nil { // application XID: ignored
		t.Fatal(err)
	}
	if err := m.InjectXID(bad, 79); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-time.After(time.Second):
		t.Fatal("no health change notification within 1s of XID 79")
	}
	if mon.Healthy(bad) || !mon.Healthy(other) {
		t.Fatalf("healthy(bad)=%v healthy(other)=%v", mon.Healthy(bad), mon.Healthy(other))
	}
	if mon.LastXID(bad) != 79 {
		t.Errorf("last XID %d", mon.LastXID(bad))
	}

	// The GPU stays lost: re-probes after the hold keep it unhealthy.
	m.SetLost(bad, true)
	fc.Step(time.Minute)
	mon.ProbeDue(context.Background())
	if mon.Healthy(bad) {
		t.Fatal("lost GPU recovered")
	}
	// NVML answers again: the next due probe returns it.
	m.SetLost(bad, false)
	eventually(t, "recovery", 5*time.Second, func() bool {
		fc.Step(10 * time.Second)
		return mon.Healthy(bad)
	})
	if f, _ := rec.snapshot(); len(f) != 0 {
		t.Errorf("monitor reported failures %v", f)
	}
}

func TestMonitorWaitErrorMarksNothing(t *testing.T) {
	m, _ := nvml.NewMock("dgxh100", "n")
	fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rec := &recorder{}
	mon, _ := startMonitor(t, m, fc, rec)
	eventually(t, "event stream open", 2*time.Second, func() bool { return m.OpenEventStreams() == 1 })
	m.FailWait(gonvml.ERROR_UNKNOWN)
	eventually(t, "failure reported", 2*time.Second, func() bool {
		f, _ := rec.snapshot()
		return len(f) == 1 && f[0] == "EventWaitFailed"
	})
	for _, u := range m.UUIDs() {
		if !mon.Healthy(u) {
			t.Errorf("%s marked unhealthy by a wait error", u)
		}
	}
	if mon.Failure() == "" {
		t.Error("Failure() empty after wait error")
	}
	// After the backoff the monitor re-subscribes and reports running again.
	eventually(t, "resubscribe", 5*time.Second, func() bool {
		fc.Step(time.Second)
		_, running := rec.snapshot()
		return running >= 2 && m.OpenEventStreams() == 1
	})
}

func TestMonitorCannotStartIsReported(t *testing.T) {
	m, _ := nvml.NewMock("dgxa100", "n")
	m.FailEventSetCreate(gonvml.ERROR_NOT_SUPPORTED)
	fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rec := &recorder{}
	mon, _ := startMonitor(t, m, fc, rec)
	eventually(t, "failure reported", 2*time.Second, func() bool {
		f, _ := rec.snapshot()
		return len(f) >= 1 && f[0] == "EventSubscriptionFailed"
	})
	if _, running := rec.snapshot(); running != 0 {
		t.Errorf("reported running %d times", running)
	}
	m.FailEventSetCreate(gonvml.SUCCESS)
	eventually(t, "monitor recovers", 5*time.Second, func() bool {
		fc.Step(2 * time.Second)
		_, running := rec.snapshot()
		return running == 1
	})
	if mon.Failure() != "" {
		t.Errorf("Failure() = %q after recovery", mon.Failure())
	}
}
