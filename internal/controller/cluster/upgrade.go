package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/clusterbackup"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/maintenance"
	"fke.dev/fke/internal/pki"
)

// Upgrade steps, in order (status.upgrade.step). Between the snapshot and
// the addons come the components, by name, in upgradeOrder.
const (
	StepSnapshot = "Snapshot"
	StepAddons   = "Addons"
	StepDone     = "Done"
)

// upgradeOrder is the order upstream requires: the API server first (it
// must never be older than its clients), then the controller manager and
// the scheduler. etcd is the same release for every version fke runs and
// is not restarted.
var upgradeOrder = []string{controlplane.APIServer, controlplane.ControllerManager, controlplane.Scheduler}

// upgradeRetry is how long a failed step waits before it is tried again.
const upgradeRetry = 30 * time.Second

// NextUpgradeStep returns the next step of moving a control plane whose
// components run at running (by component) to target, given the last
// upgrade's status up; "" when nothing is left to do. A snapshot comes
// first, unless one was taken for this upgrade already.
func NextUpgradeStep(target string, running map[string]string, up *fkev1.UpgradeStatus) string {
	var pending []string
	for _, c := range upgradeOrder {
		if running[c] != target {
			pending = append(pending, c)
		}
	}
	current := up != nil && up.To == target && up.CompletionTime == nil
	switch {
	case len(pending) > 0 && (!current || up.Snapshot == ""):
		return StepSnapshot
	case len(pending) > 0:
		return pending[0]
	case current:
		return StepAddons
	}
	return ""
}

// UpgradeSnapshot returns the newest of kept taken of the cluster with uid
// since start (second precision, as the API stores times): the snapshot of
// an upgrade started then, when one is there. Any snapshot since the start
// holds the state before the upgrade: the snapshot is its first step.
func UpgradeSnapshot(kept []backup.Snapshot, start time.Time, uid string) (backup.Snapshot, bool) {
	var best backup.Snapshot
	found := false
	for _, s := range kept {
		if s.ClusterUID != uid || s.Time.Before(start.Truncate(time.Second)) {
			continue
		}
		if !found || s.Time.After(best.Time) {
			best, found = s, true
		}
	}
	return best, found
}

// runningVersions returns the version each component of st runs.
func runningVersions(st controlplane.Status) map[string]string {
	out := map[string]string{}
	for _, c := range st.Components {
		out[c.Name] = c.Version
	}
	return out
}

// componentVersions is what status.controlPlane records of st.
func componentVersions(st controlplane.Status) []fkev1.ComponentVersion {
	out := make([]fkev1.ComponentVersion, 0, len(st.Components))
	for _, c := range st.Components {
		out = append(out, fkev1.ComponentVersion{Name: c.Name, Version: c.Version, Ready: c.Ready})
	}
	return out
}

// startVersions tells a runtime at which version each component starts
// again (after a manager restart in the middle of an upgrade): the version
// status.controlPlane recorded.
func startVersions(cl *fkev1.Cluster) map[string]string {
	out := map[string]string{}
	for _, c := range cl.Status.ControlPlane {
		if c.Version != "" {
			out[c.Name] = c.Version
		}
	}
	return out
}

// reconcileUpgrade takes the next step of an upgrade of cl's ready control
// plane to spec.version. It returns handled when it took a step (Reconcile
// returns res then); flush records the status before a long step, so that
// `fke cluster get` shows it while it runs.
func (r *Reconciler) reconcileUpgrade(ctx context.Context, cl *fkev1.Cluster, spec controlplane.Spec, st controlplane.Status, bundle pki.Bundle, flush func() error) (res time.Duration, handled bool) {
	target := cl.Spec.Version
	running := runningVersions(st)
	step := NextUpgradeStep(target, running, cl.Status.Upgrade)
	if step == "" {
		return 0, false
	}
	if r.APIReader != nil {
		// The cache may not show the last step's status yet.
		fresh := &fkev1.Cluster{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cl), fresh); err == nil && fresh.Spec.Version == target {
			cl.Status.Upgrade = fresh.Status.Upgrade
			if step = NextUpgradeStep(target, running, cl.Status.Upgrade); step == "" {
				return 0, false
			}
		}
	}
	now := metav1.Now()
	up := cl.Status.Upgrade
	if up == nil || up.To != target || up.CompletionTime != nil {
		up = &fkev1.UpgradeStatus{From: running[controlplane.APIServer], To: target, StartTime: now}
		cl.Status.Upgrade = up
		r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "UpgradeStarted", "Upgrade", "upgrading the control plane from %s to %s", up.From, target)
	}
	up.Step, up.Message = step, ""
	setUpgrading(cl, metav1.ConditionTrue, stepReason(step), describeStep(step, up))
	if step != StepAddons {
		// A long step: show it while it runs. A write refused because the
		// cluster changed meanwhile means this reconcile read an old
		// cluster: the next one decides again.
		if err := flush(); err != nil {
			return conflictRetry, true
		}
	}

	var err error
	switch step {
	case StepSnapshot:
		kept, _ := backup.List(r.backupDir(cl.Namespace, cl.Name)) // none readable: take one
		if snap, ok := UpgradeSnapshot(kept, up.StartTime.Time, string(cl.UID)); ok {
			// Taken already for this upgrade, but not recorded (the status
			// write was lost, or the manager stopped in between): no second one.
			up.Snapshot = snap.Name
			err = clusterbackup.EnsureRestoreKeys(ctx, r.Client, cl, bundle)
			break
		}
		var snap backup.Snapshot
		if snap, err = r.keepSnapshot(ctx, cl, bundle, now.Time); err == nil {
			up.Snapshot = snap.Name
			r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "SnapshotTaken", "Upgrade", "snapshot %s of etcd taken before the upgrade (%d bytes, revision %d)", snap.Name, snap.Size, snap.Revision)
		}
	case StepAddons:
		// The addons every cluster gets are applied again by this
		// reconcile, now against the upgraded API server.
		r.base.Delete(client.ObjectKeyFromObject(cl).String())
		done := metav1.Now()
		up.Step, up.CompletionTime = StepDone, &done
		cl.Status.Version = "" // read again from the upgraded API server
		msg := fmt.Sprintf("upgraded from %s to %s in %s (snapshot %s taken first)", up.From, up.To, done.Sub(up.StartTime.Time).Round(100*time.Millisecond), up.Snapshot)
		setUpgrading(cl, metav1.ConditionFalse, fkev1.ReasonUpgraded, msg)
		r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, fkev1.ReasonUpgraded, "Upgrade", "%s", msg)
		return 0, false
	default:
		up2 := spec
		up2.Version = target
		err = r.runtime(cl).Upgrade(ctx, up2, step)
		if err == nil {
			// Recorded with this step: a manager restarted before the next
			// reconcile starts the component at the version it runs now,
			// not at the one it ran before (a downgrade, and the step again).
			recordVersion(cl, step, target)
			r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "ComponentUpgraded", "Upgrade", "%s now runs %s", step, target)
			if step == controlplane.APIServer {
				cl.Status.Version = ""
			}
		}
	}
	if err != nil {
		up.Message = fmt.Sprintf("step %s failed: %v", step, err)
		setUpgrading(cl, metav1.ConditionFalse, fkev1.ReasonUpgradeFailed, up.Message+fmt.Sprintf("; the cluster keeps serving, retried in %s", upgradeRetry))
		r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, fkev1.ReasonUpgradeFailed, "Upgrade", "%s", up.Message)
		return upgradeRetry, true
	}
	return time.Millisecond, true
}

// recordVersion records in status.controlPlane that component runs
// version (and serves: Runtime.Upgrade returns once it does).
func recordVersion(cl *fkev1.Cluster, component, version string) {
	for i := range cl.Status.ControlPlane {
		if c := &cl.Status.ControlPlane[i]; c.Name == component {
			c.Version, c.Ready = version, true
			return
		}
	}
	cl.Status.ControlPlane = append(cl.Status.ControlPlane, fkev1.ComponentVersion{Name: component, Version: version, Ready: true})
}

// stepReason is the Upgrading condition's reason during step.
func stepReason(step string) string {
	switch step {
	case controlplane.APIServer:
		return "UpgradingAPIServer"
	case controlplane.ControllerManager:
		return "UpgradingControllerManager"
	case controlplane.Scheduler:
		return "UpgradingScheduler"
	case StepSnapshot:
		return "TakingSnapshot"
	}
	return "UpgradingAddons"
}

// describeStep says what step does, for the Upgrading condition.
func describeStep(step string, up *fkev1.UpgradeStatus) string {
	n := map[string]int{StepSnapshot: 1, controlplane.APIServer: 2, controlplane.ControllerManager: 3, controlplane.Scheduler: 4, StepAddons: 5}[step]
	what := "upgrading " + step
	if step == StepSnapshot {
		what = "taking an etcd snapshot"
	} else if step == StepAddons {
		what = "applying the addons again"
	}
	return fmt.Sprintf("%s → %s, step %d of 5: %s", up.From, up.To, n, what)
}

func setUpgrading(cl *fkev1.Cluster, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{
		Type: fkev1.ConditionUpgrading, Status: s, Reason: reason, Message: msg, ObservedGeneration: cl.Generation,
	})
}

// autoUpgrade starts the upgrade spec.autoUpgrade asks for when the
// maintenance window is open, by setting spec.version (as a user would).
// It reports whether it started one, and else when the window opens when
// an upgrade waits for it (0: none is due).
func (r *Reconciler) autoUpgrade(ctx context.Context, cl *fkev1.Cluster, now time.Time) (started bool, opens time.Duration, err error) {
	target := maintenance.AutoUpgradeTarget(cl.Spec.Version, cl.Spec.AutoUpgrade)
	if target == "" {
		return false, 0, nil
	}
	open, boundary, err := maintenance.Open(cl.Spec.Maintenance, now)
	if err != nil {
		return false, 0, err
	}
	if !open {
		return false, boundary.Sub(now), nil
	}
	from := cl.Spec.Version
	patch := client.MergeFrom(cl.DeepCopy())
	cl.Spec.Version = target
	if err := r.Client.Patch(ctx, cl, patch); err != nil {
		return false, 0, fmt.Errorf("starting the automatic upgrade to %s: %w", target, err)
	}
	r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "AutoUpgrade", "Upgrade", "automatic upgrade (%s) from %s to %s, inside the maintenance window", cl.Spec.AutoUpgrade, from, target)
	return true, 0, nil
}
