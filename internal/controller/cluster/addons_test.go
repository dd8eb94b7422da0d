package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

func TestDecideAddon(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(earlier.Add(time.Minute))
	running := controlplane.ComponentStatus{Name: "metrics-server", Running: true, PID: 7}
	ready := running
	ready.Ready = true
	crashing := controlplane.ComponentStatus{Name: "metrics-server", Restarts: failedAfterRestarts, Log: "logs/metrics-server.log"}
	base := addonObservation{Name: "metrics-server", Version: "v0.8.0", Enabled: true}
	with := func(f func(*addonObservation)) addonObservation {
		o := base
		f(&o)
		return o
	}
	for _, tc := range []struct {
		name      string
		prev      *fkev1.AddonStatus
		obs       addonObservation
		wantNil   bool
		phase     fkev1.AddonPhase
		message   string // substring
		keepsTime bool
	}{
		{name: "disabled and never installed leaves status", obs: with(func(o *addonObservation) { o.Enabled, o.Removed = false, true }), wantNil: true},
		{name: "disabled, being removed", obs: with(func(o *addonObservation) { o.Enabled = false }), phase: fkev1.AddonRemoving, message: "removing"},
		{name: "disabled, removal failed", obs: with(func(o *addonObservation) { o.Enabled, o.Err = false, errors.New("forbidden") }),
			phase: fkev1.AddonRemoving, message: "removing it failed: forbidden"},
		{name: "process cannot start", obs: with(func(o *addonObservation) { o.Err = errors.New("metrics-server not found") }),
			phase: fkev1.AddonFailed, message: "not found"},
		{name: "no process yet", obs: base, phase: fkev1.AddonInstalling, message: "waiting for metrics-server to serve"},
		{name: "starting", obs: with(func(o *addonObservation) { o.Process, o.HasProcess = running, true }), phase: fkev1.AddonInstalling},
		{name: "exits again and again", obs: with(func(o *addonObservation) { o.Process, o.HasProcess = crashing, true }),
			phase: fkev1.AddonFailed, message: "exited 3 times without serving; see its log (logs/metrics-server.log)"},
		{name: "serves, API server has not checked it", obs: with(func(o *addonObservation) {
			o.Process, o.HasProcess, o.Why = ready, true, "APIService v1beta1.metrics.k8s.io not checked by the API server yet"
		}), phase: fkev1.AddonInstalling, message: "not checked"},
		{name: "ready", obs: with(func(o *addonObservation) { o.Process, o.HasProcess, o.Serving, o.Why = ready, true, true, "serves x" }),
			phase: fkev1.AddonReady, message: "serves x"},
		{name: "same phase keeps its transition time", prev: &fkev1.AddonStatus{Name: "metrics-server", Phase: fkev1.AddonReady, LastTransitionTime: earlier},
			obs: with(func(o *addonObservation) { o.Process, o.HasProcess, o.Serving = ready, true, true }), phase: fkev1.AddonReady, keepsTime: true},
		{name: "new phase moves it", prev: &fkev1.AddonStatus{Name: "metrics-server", Phase: fkev1.AddonReady, LastTransitionTime: earlier},
			obs: with(func(o *addonObservation) { o.Process, o.HasProcess = running, true }), phase: fkev1.AddonInstalling},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideAddon(tc.prev, tc.obs, now)
			if tc.wantNil {
				if got != nil {
					t.Fatalf("got %+v, want no status", got)
				}
				return
			}
			if got == nil {
				t.Fatal("got no status")
			}
			if got.Phase != tc.phase || !strings.Contains(got.Message, tc.message) {
				t.Errorf("got %s %q, want %s with %q", got.Phase, got.Message, tc.phase, tc.message)
			}
			if got.Name != "metrics-server" || got.Version != "v0.8.0" {
				t.Errorf("name/version %s/%s", got.Name, got.Version)
			}
			wantTime := now
			if tc.keepsTime {
				wantTime = earlier
			}
			if !got.LastTransitionTime.Equal(&wantTime) {
				t.Errorf("transition time %v, want %v", got.LastTransitionTime, wantTime)
			}
		})
	}
}

func TestAddonsCondition(t *testing.T) {
	st := func(name string, p fkev1.AddonPhase, msg string) fkev1.AddonStatus {
		return fkev1.AddonStatus{Name: name, Phase: p, Message: msg}
	}
	for _, tc := range []struct {
		name     string
		base     error
		statuses []fkev1.AddonStatus
		status   metav1.ConditionStatus
		reason   string
		message  string // substring
	}{
		{"base addons failed", errors.New("CRD not established"), nil, metav1.ConditionFalse, "InstallFailed", "CRD not established"},
		{"nothing managed", nil, nil, metav1.ConditionTrue, fkev1.ReasonReady, "ProvisioningRequest API"},
		{"all ready", nil, []fkev1.AddonStatus{st("metrics-server", fkev1.AddonReady, "serves")}, metav1.ConditionTrue, fkev1.ReasonReady, "ready: metrics-server"},
		{"one installing", nil, []fkev1.AddonStatus{st("metrics-server", fkev1.AddonInstalling, "waiting")},
			metav1.ConditionFalse, fkev1.ReasonAddonsNotReady, "metrics-server Installing: waiting"},
		{"one failed", nil, []fkev1.AddonStatus{st("a", fkev1.AddonReady, ""), st("metrics-server", fkev1.AddonFailed, "not found")},
			metav1.ConditionFalse, fkev1.ReasonAddonFailed, "metrics-server Failed: not found"},
		{"being removed does not count", nil, []fkev1.AddonStatus{st("metrics-server", fkev1.AddonRemoving, "")}, metav1.ConditionTrue, fkev1.ReasonReady, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := addonsCondition(tc.base, tc.statuses, 4)
			if c.Type != fkev1.ConditionAddonsReady || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) || c.ObservedGeneration != 4 {
				t.Errorf("got %+v, want %s %s with %q", c, tc.status, tc.reason, tc.message)
			}
		})
	}
}

// fakeRuntime runs no processes: EnsureAddons reports the asked addons
// with the state in procs (absent: not started).
type fakeRuntime struct {
	controlplane.Runtime
	procs map[string]controlplane.ComponentStatus
	asked []string
	err   error
}

func (f *fakeRuntime) EnsureAddons(_ context.Context, _ string, addons []controlplane.Addon) (controlplane.Status, error) {
	f.asked = f.asked[:0]
	var st controlplane.Status
	for _, a := range addons {
		f.asked = append(f.asked, a.Name)
		if p, ok := f.procs[a.Name]; ok {
			st.Addons = append(st.Addons, p)
		}
	}
	return st, f.err
}

// fakeAddon records the calls of the cluster controller.
type fakeAddon struct {
	enabled bool
	serving bool
	// parts: the addon runs fake-PART for each; none: one process, fake.
	parts []string
	calls []string
}

func (f *fakeAddon) Name() string                { return "fake" }
func (f *fakeAddon) Version() string             { return "v1" }
func (f *fakeAddon) Enabled(*fkev1.Cluster) bool { return f.enabled }
func (f *fakeAddon) Processes(*fkev1.Cluster, controlplane.AddonNetwork, pki.Bundle) ([]controlplane.Addon, error) {
	if len(f.parts) == 0 {
		return []controlplane.Addon{{Name: "fake", Binary: "fake"}}, nil
	}
	var out []controlplane.Addon
	for _, p := range f.parts {
		out = append(out, controlplane.Addon{Name: "fake-" + p, Binary: "fake-" + p})
	}
	return out, nil
}
func (f *fakeAddon) Install(context.Context, *rest.Config, *fkev1.Cluster, pki.Bundle, controlplane.AddonNetwork) error {
	f.calls = append(f.calls, "install")
	return nil
}
func (f *fakeAddon) Serving(context.Context, *rest.Config) (bool, string, error) {
	f.calls = append(f.calls, "serving")
	return f.serving, "why", nil
}
func (f *fakeAddon) Remove(context.Context, *rest.Config) error {
	f.calls = append(f.calls, "remove")
	return nil
}

// TestReconcileAddons: an enabled addon's objects go in while its process
// starts and it is asked whether it serves once the process is ready; a
// disabled one that was installed is removed once its process is gone, and
// leaves status.
func TestReconcileAddons(t *testing.T) {
	ready := controlplane.ComponentStatus{Name: "fake", Running: true, Ready: true, PID: 1}
	starting := controlplane.ComponentStatus{Name: "fake", Running: true, PID: 1}
	named := func(s controlplane.ComponentStatus, name string) controlplane.ComponentStatus {
		s.Name = name
		return s
	}
	two := []string{"a", "b"}
	for _, tc := range []struct {
		name      string
		enabled   bool
		serving   bool
		parts     []string
		procs     map[string]controlplane.ComponentStatus
		known     bool // in status.addons before the pass
		wantCalls string
		wantPhase fkev1.AddonPhase // "" means no status
		pending   bool
	}{
		{"starting: objects go in", true, false, nil, map[string]controlplane.ComponentStatus{"fake": starting}, false, "install", fkev1.AddonInstalling, true},
		{"process ready, API not yet", true, false, nil, map[string]controlplane.ComponentStatus{"fake": ready}, false, "install,serving", fkev1.AddonInstalling, true},
		{"serving", true, true, nil, map[string]controlplane.ComponentStatus{"fake": ready}, false, "install,serving", fkev1.AddonReady, false},
		{"could not start", true, false, nil, nil, false, "", fkev1.AddonFailed, false},
		{"turned off: removed", false, false, nil, nil, true, "remove", "", false},
		{"never on: nothing to do", false, false, nil, nil, false, "", "", false},
		{"two processes, one still starting", true, true, two, map[string]controlplane.ComponentStatus{"fake-a": named(ready, "fake-a"), "fake-b": named(starting, "fake-b")},
			false, "install", fkev1.AddonInstalling, true},
		{"two processes, both ready", true, true, two, map[string]controlplane.ComponentStatus{"fake-a": named(ready, "fake-a"), "fake-b": named(ready, "fake-b")},
			false, "install,serving", fkev1.AddonReady, false},
		{"two processes, one not started", true, true, two, map[string]controlplane.ComponentStatus{"fake-a": named(ready, "fake-a")},
			false, "", fkev1.AddonFailed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &fakeRuntime{procs: tc.procs}
			if tc.procs == nil && tc.enabled {
				rt.err = errors.New("fake not found")
			}
			a := &fakeAddon{enabled: tc.enabled, serving: tc.serving, parts: tc.parts}
			r := &Reconciler{Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: rt}, Recorder: events.NewFakeRecorder(10), Managed: []addons.Managed{a}}
			cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo"}}
			if tc.known {
				cl.Status.Addons = []fkev1.AddonStatus{{Name: "fake", Phase: fkev1.AddonReady}}
			}
			pending := r.reconcileAddons(context.Background(), cl, "default/demo", controlplane.AddonNetwork{APIServer: "https://127.0.0.1:1", BindAddress: "127.0.0.1"}, pki.Bundle{}, &rest.Config{}, nil)
			if got := strings.Join(a.calls, ","); got != tc.wantCalls {
				t.Errorf("calls %q, want %q", got, tc.wantCalls)
			}
			if want := max(1, len(tc.parts)); tc.enabled != (len(rt.asked) == want) {
				t.Errorf("processes asked of the runtime: %v", rt.asked)
			}
			st, ok := findAddon(cl.Status.Addons, "fake")
			switch {
			case tc.wantPhase == "" && ok:
				t.Errorf("status %+v, want none", st)
			case tc.wantPhase != "" && (!ok || st.Phase != tc.wantPhase):
				t.Errorf("status %+v, want phase %s", st, tc.wantPhase)
			}
			if pending != tc.pending {
				t.Errorf("pending %v, want %v", pending, tc.pending)
			}
			if c := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionAddonsReady); c == nil ||
				(c.Status == metav1.ConditionTrue) != (tc.wantPhase == "" || tc.wantPhase == fkev1.AddonReady) {
				t.Errorf("AddonsReady %+v with phase %q", c, tc.wantPhase)
			}
		})
	}
}

type pollingRuntime struct {
	controlplane.Runtime
	every time.Duration
}

func (p pollingRuntime) StartPollInterval() time.Duration { return p.every }

// TestStartPoll: a starting plane is asked again at its runtime's interval
// when the runtime has one, else every requeueStarting.
func TestStartPoll(t *testing.T) {
	for _, tt := range []struct {
		name string
		rt   controlplane.Runtime
		want time.Duration
	}{
		{"a runtime without an interval", &fakeRuntime{}, requeueStarting},
		{"a runtime with one", pollingRuntime{every: 500 * time.Millisecond}, 500 * time.Millisecond},
	} {
		if got := startPoll(tt.rt); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
