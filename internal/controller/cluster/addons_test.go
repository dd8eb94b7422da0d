package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
)

func TestDecideAddon(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(earlier.Add(time.Minute))
	running := controlplane.ComponentStatus{Name: "metrics-server", Running: true, PID: 7}
	ready := running
	ready.Ready = true
	crashing := controlplane.ComponentStatus{Name: "metrics-server", Restarts: failedAfterRestarts}
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
			phase: fkev1.AddonFailed, message: "exited 3 times"},
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
