package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

// failedAfterRestarts: an addon process that exited this often without
// serving is reported Failed (it is still restarted with backoff).
const failedAfterRestarts = 3

// addonObservation is what one pass saw of one managed addon.
type addonObservation struct {
	Name, Version string
	Enabled       bool
	// Err is why its process could not be started or its objects not
	// applied or removed.
	Err error
	// Process is its process, when one runs (HasProcess); for an addon of
	// several processes, all of them: Ready when every one is, the most
	// restarts of any.
	Process    controlplane.ComponentStatus
	HasProcess bool
	// procs names its processes.
	procs []string
	// Serving and Why: whether the tenant's API server reaches it.
	Serving bool
	Why     string
	// Removed: disabled, and its objects and process are gone.
	Removed bool
}

// decideAddon returns the status of an addon after a pass, or nil when it
// is to leave status.addons (disabled and removed). prev is its status
// before the pass (nil when none); the transition time moves with the phase.
func decideAddon(prev *fkev1.AddonStatus, o addonObservation, now metav1.Time) *fkev1.AddonStatus {
	st := &fkev1.AddonStatus{Name: o.Name, Version: o.Version}
	switch {
	case !o.Enabled && o.Removed:
		return nil
	case !o.Enabled:
		st.Phase, st.Message = fkev1.AddonRemoving, "turned off; removing it"
		if o.Err != nil {
			st.Message = "turned off; removing it failed: " + o.Err.Error()
		}
	case o.Err != nil:
		st.Phase, st.Message = fkev1.AddonFailed, o.Err.Error()
	case !o.HasProcess || !o.Process.Ready:
		st.Phase, st.Message = fkev1.AddonInstalling, "waiting for "+o.Name+" to serve"
		if o.Process.Restarts >= failedAfterRestarts {
			st.Phase = fkev1.AddonFailed
			proc := o.Process.Name
			if proc == "" {
				proc = o.Name
			}
			st.Message = fmt.Sprintf("%s exited %d times without serving; see its log", proc, o.Process.Restarts)
			if o.Process.Log != "" {
				st.Message += " (" + o.Process.Log + ")"
			}
		}
	case !o.Serving:
		st.Phase, st.Message = fkev1.AddonInstalling, o.Why
	default:
		st.Phase, st.Message = fkev1.AddonReady, o.Why
	}
	st.LastTransitionTime = now
	if prev != nil && prev.Phase == st.Phase {
		st.LastTransitionTime = prev.LastTransitionTime
	}
	return st
}

// addonsCondition is the AddonsReady condition: base says whether the
// addons every cluster gets are installed (nil: yes), statuses are the
// managed addons'. Addons being removed do not count against it.
func addonsCondition(base error, statuses []fkev1.AddonStatus, gen int64) metav1.Condition {
	c := metav1.Condition{Type: fkev1.ConditionAddonsReady, ObservedGeneration: gen}
	if base != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "InstallFailed", base.Error()
		return c
	}
	var waiting, ready []string
	failed := false
	for _, s := range statuses {
		switch s.Phase {
		case fkev1.AddonReady:
			ready = append(ready, s.Name)
		case fkev1.AddonRemoving:
		default:
			failed = failed || s.Phase == fkev1.AddonFailed
			waiting = append(waiting, fmt.Sprintf("%s %s: %s", s.Name, s.Phase, s.Message))
		}
	}
	if len(waiting) > 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, fkev1.ReasonAddonsNotReady, strings.Join(waiting, "; ")
		if failed {
			c.Reason = fkev1.ReasonAddonFailed
		}
		return c
	}
	msg := "ProvisioningRequest API and node bootstrap RBAC installed"
	if len(ready) > 0 {
		msg += "; ready: " + strings.Join(ready, ", ")
	}
	c.Status, c.Reason, c.Message = metav1.ConditionTrue, fkev1.ReasonReady, msg
	return c
}

// reconcileAddons runs the managed addons of a cluster whose control plane
// is ready: the processes beside it (one EnsureAddons call with every
// enabled addon, so disabled ones stop), then each addon's objects in the
// tenant, and records status.addons and AddonsReady. base is the outcome of
// installing the addons every cluster gets. It reports whether an addon is
// being installed or removed (the caller polls sooner). n is where the
// runtime runs the processes.
func (r *Reconciler) reconcileAddons(ctx context.Context, cl *fkev1.Cluster, key string, n controlplane.AddonNetwork, b pki.Bundle, cfg *rest.Config, base error) (pending bool) {
	log := logr.FromContextOrDiscard(ctx)
	obs := make([]addonObservation, len(r.Managed))
	var procs []controlplane.Addon
	for i, a := range r.Managed {
		obs[i] = addonObservation{Name: a.Name(), Version: a.Version(), Enabled: a.Enabled(cl)}
		if !obs[i].Enabled {
			continue
		}
		ps, err := a.Processes(cl, n, b)
		if err != nil {
			obs[i].Err = err
			continue
		}
		for _, p := range ps {
			obs[i].procs = append(obs[i].procs, p.Name)
		}
		procs = append(procs, ps...)
	}
	st, ensureErr := r.runtime(cl).EnsureAddons(ctx, key, procs)
	for i, a := range r.Managed {
		o := &obs[i]
		if o.Enabled {
			o.Process, o.HasProcess = processesStatus(st, o.procs)
		} else {
			// A disabled addon's processes are not listed: any process named
			// after the addon (NAME, or NAME-PART for an addon of several)
			// counts.
			o.HasProcess = anyAddonProcess(st, o.Name)
		}
		if !o.Enabled {
			if _, known := findAddon(cl.Status.Addons, o.Name); !known {
				o.Removed = true // never installed, or removed already
				continue
			}
			if o.HasProcess {
				o.Err = errors.New("its process still runs")
				continue
			}
			if err := a.Remove(ctx, cfg); err != nil {
				o.Err = err
				continue
			}
			o.Removed = true
			r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "AddonRemoved", "Remove", "removed addon %s", o.Name)
			continue
		}
		if o.Err != nil {
			continue
		}
		if !o.HasProcess {
			o.Err = fmt.Errorf("starting %s: %w", o.Name, ensureErr)
			continue
		}
		// The objects go in while the process starts: it needs its RBAC to
		// become healthy.
		if err := a.Install(ctx, cfg, cl, b, n); err != nil {
			o.Err = err
			continue
		}
		if o.Process.Ready {
			o.Serving, o.Why, o.Err = a.Serving(ctx, cfg)
		}
	}
	now := metav1.Now()
	var next []fkev1.AddonStatus
	for _, o := range obs {
		prev, _ := findAddon(cl.Status.Addons, o.Name)
		st := decideAddon(prev, o, now)
		if st == nil {
			continue
		}
		// Failed addons are retried at the slow pace.
		if st.Phase == fkev1.AddonInstalling || st.Phase == fkev1.AddonRemoving {
			pending = true
		}
		if prev == nil || prev.Phase != st.Phase {
			log.Info("addon phase", "cluster", key, "addon", st.Name, "phase", st.Phase, "message", st.Message)
			if st.Phase == fkev1.AddonFailed {
				r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, "AddonFailed", "Install", "addon %s: %s", st.Name, st.Message)
			}
			if st.Phase == fkev1.AddonReady {
				r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "AddonReady", "Install", "addon %s: %s", st.Name, st.Message)
			}
		}
		next = append(next, *st)
	}
	// Addons this fke no longer manages keep no status.
	cl.Status.Addons = next
	meta.SetStatusCondition(&cl.Status.Conditions, addonsCondition(base, next, cl.Generation))
	return pending
}

// processesStatus folds the statuses of an addon's processes into one: it
// runs when all of them run, is Ready when all are, and has the most
// restarts of any.
func processesStatus(st controlplane.Status, names []string) (controlplane.ComponentStatus, bool) {
	out := controlplane.ComponentStatus{Running: true, Ready: true}
	if len(names) == 0 {
		return controlplane.ComponentStatus{}, false
	}
	for _, n := range names {
		p, ok := st.AddonStatus(n)
		if !ok {
			return controlplane.ComponentStatus{}, false
		}
		if out.Name == "" || p.Restarts >= out.Restarts {
			out.Name, out.Log = n, p.Log // the one that exited most
		}
		out.Running = out.Running && p.Running
		out.Ready = out.Ready && p.Ready
		out.Restarts = max(out.Restarts, p.Restarts)
		if out.PID == 0 {
			out.PID = p.PID
		}
	}
	return out, true
}

// anyAddonProcess reports whether a process of addon name still runs.
func anyAddonProcess(st controlplane.Status, name string) bool {
	for _, a := range st.Addons {
		if a.Name == name || strings.HasPrefix(a.Name, name+"-") {
			return true
		}
	}
	return false
}

func findAddon(statuses []fkev1.AddonStatus, name string) (*fkev1.AddonStatus, bool) {
	i := slices.IndexFunc(statuses, func(s fkev1.AddonStatus) bool { return s.Name == name })
	if i < 0 {
		return nil, false
	}
	return &statuses[i], true
}
