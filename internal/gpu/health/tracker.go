package health

import (
	"sort"
	"time"

	"fke.dev/fke/internal/gpu/nvml"
)

// State is a device's health.
type State string

const (
	Healthy   State = "Healthy"
	Unhealthy State = "Unhealthy"
)

// Status is one device's health record.
type Status struct {
	State State
	// Class, Reason and XID describe the event that made the device unhealthy.
	Class  Class
	Reason string
	XID    uint64
	// Since is when State last changed.
	Since time.Time
	// LastCritical is the time of the last event that marked the device unhealthy.
	LastCritical time.Time
	// NextProbe is when an unhealthy device is probed next.
	NextProbe time.Time
	// LastXID is the last XID seen on the device, whatever its class (0 if none).
	LastXID uint64
}

// Tracker is the per-device health state machine. It is pure (no I/O, time
// passed in) and not safe for concurrent use.
//
//	Healthy --critical event--> Unhealthy
//	Unhealthy --critical event--> Unhealthy (hold restarts)
//	Unhealthy --probe OK after hold--> Healthy
//	Unhealthy --probe failed--> Unhealthy (next probe after ProbeInterval)
type Tracker struct {
	policy        Policy
	hold          time.Duration
	probeInterval time.Duration
	devices       map[string]*Status
}

// NewTracker starts every device in uuids Healthy at now.
func NewTracker(policy Policy, uuids []string, hold, probeInterval time.Duration, now time.Time) *Tracker {
	t := &Tracker{policy: policy, hold: hold, probeInterval: probeInterval, devices: map[string]*Status{}}
	for _, u := range uuids {
		t.devices[u] = &Status{State: Healthy, Since: now}
	}
	return t
}

// Observe applies an event. It returns the policy's verdict and whether the
// device's State changed. Events for unknown devices change nothing: an
// event that cannot be attributed to one GPU never marks the others.
func (t *Tracker) Observe(ev nvml.Event, now time.Time) (Verdict, bool) {
	v := t.policy.Classify(ev)
	s, ok := t.devices[ev.UUID]
	if !ok {
		return v, false
	}
	if ev.Kind == nvml.EventXID {
		s.LastXID = ev.XID
	}
	if v.Action != ActionUnhealthy {
		return v, false
	}
	changed := s.State != Unhealthy
	if changed {
		s.State, s.Since = Unhealthy, now
	}
	s.Class, s.Reason, s.XID = v.Class, v.Reason, ev.XID
	s.LastCritical = now
	s.NextProbe = now.Add(t.hold)
	return v, changed
}

// DueProbes lists, sorted, the unhealthy devices whose next probe is due at now.
func (t *Tracker) DueProbes(now time.Time) []string {
	var out []string
	for u, s := range t.devices {
		if s.State == Unhealthy && !now.Before(s.NextProbe) {
			out = append(out, u)
		}
	}
	sort.Strings(out)
	return out
}

// ProbeResult applies a probe's outcome (probeErr nil: NVML says usable) and
// returns whether the device's State changed. A probe that comes before the
// hold has passed changes nothing.
func (t *Tracker) ProbeResult(uuid string, probeErr error, now time.Time) bool {
	s, ok := t.devices[uuid]
	if !ok || s.State != Unhealthy || now.Before(s.LastCritical.Add(t.hold)) {
		return false
	}
	if probeErr != nil {
		s.NextProbe = now.Add(t.probeInterval)
		return false
	}
	*s = Status{State: Healthy, Since: now, LastXID: s.LastXID}
	return true
}

// Status returns the device's record and whether the device is known.
func (t *Tracker) Status(uuid string) (Status, bool) {
	s, ok := t.devices[uuid]
	if !ok {
		return Status{}, false
	}
	return *s, true
}

// Snapshot copies every device's record.
func (t *Tracker) Snapshot() map[string]Status {
	out := make(map[string]Status, len(t.devices))
	for u, s := range t.devices {
		out[u] = *s
	}
	return out
}
