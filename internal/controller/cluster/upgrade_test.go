package cluster

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
)

func TestNextUpgradeStep(t *testing.T) {
	const old, cur = "v1.36.3", "v1.37.2"
	at := func(api, cm, sched string) map[string]string {
		return map[string]string{controlplane.Etcd: "", controlplane.APIServer: api, controlplane.ControllerManager: cm, controlplane.Scheduler: sched}
	}
	done := metav1.Now()
	cases := []struct {
		name    string
		target  string
		running map[string]string
		up      *fkev1.UpgradeStatus
		want    string
	}{
		{"nothing to do", cur, at(cur, cur, cur), nil, ""},
		{"finished upgrade stays finished", cur, at(cur, cur, cur), &fkev1.UpgradeStatus{To: cur, Snapshot: "s", CompletionTime: &done}, ""},
		{"snapshot first", cur, at(old, old, old), nil, StepSnapshot},
		{"a new target takes a new snapshot", cur, at(old, old, old), &fkev1.UpgradeStatus{To: "v1.36.9", Snapshot: "s"}, StepSnapshot},
		{"an earlier finished upgrade takes a new snapshot", cur, at(old, old, old), &fkev1.UpgradeStatus{To: cur, Snapshot: "s", CompletionTime: &done}, StepSnapshot},
		{"failed snapshot is tried again", cur, at(old, old, old), &fkev1.UpgradeStatus{To: cur}, StepSnapshot},
		{"API server after the snapshot", cur, at(old, old, old), &fkev1.UpgradeStatus{To: cur, Snapshot: "s"}, controlplane.APIServer},
		{"controller manager next", cur, at(cur, old, old), &fkev1.UpgradeStatus{To: cur, Snapshot: "s"}, controlplane.ControllerManager},
		{"scheduler next", cur, at(cur, cur, old), &fkev1.UpgradeStatus{To: cur, Snapshot: "s"}, controlplane.Scheduler},
		{"addons last", cur, at(cur, cur, cur), &fkev1.UpgradeStatus{To: cur, Snapshot: "s"}, StepAddons},
		{"API server first even if others moved (restart mid-way)", cur, at(old, cur, old), &fkev1.UpgradeStatus{To: cur, Snapshot: "s"}, controlplane.APIServer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NextUpgradeStep(c.target, c.running, c.up); got != c.want {
				t.Errorf("NextUpgradeStep = %q, want %q", got, c.want)
			}
		})
	}
}

func TestStartVersions(t *testing.T) {
	cl := &fkev1.Cluster{Status: fkev1.ClusterStatus{ControlPlane: []fkev1.ComponentVersion{
		{Name: controlplane.Etcd}, {Name: controlplane.APIServer, Version: "v1.37.2"}, {Name: controlplane.Scheduler, Version: "v1.36.3"},
	}}}
	got := startVersions(cl)
	if len(got) != 2 || got[controlplane.APIServer] != "v1.37.2" || got[controlplane.Scheduler] != "v1.36.3" {
		t.Errorf("startVersions = %v", got)
	}
}

// upgradeRuntime upgrades nothing: it records the steps asked.
type upgradeRuntime struct {
	controlplane.Runtime
	steps []string
}

func (u *upgradeRuntime) Upgrade(_ context.Context, _ controlplane.Spec, component string) error {
	u.steps = append(u.steps, component)
	return nil
}

// TestUpgradeStepRecordsTheVersion: once a component runs the new
// version, status.controlPlane says so in the status written with the
// step, so a manager restarted before the next reconcile starts it at the
// new version (it used to start it at the old one, and upgrade it again).
func TestUpgradeStepRecordsTheVersion(t *testing.T) {
	const old, cur = "v1.36.3", "v1.37.2"
	cl := &fkev1.Cluster{Spec: fkev1.ClusterSpec{Version: cur}}
	cl.Status.Upgrade = &fkev1.UpgradeStatus{From: old, To: cur, Snapshot: "20261201T120000Z", StartTime: metav1.Now()}
	var st controlplane.Status
	for _, c := range []string{controlplane.Etcd, controlplane.APIServer, controlplane.ControllerManager, controlplane.Scheduler} {
		v := old
		if c == controlplane.Etcd {
			v = ""
		}
		st.Components = append(st.Components, controlplane.ComponentStatus{Name: c, Version: v, Running: true, Ready: true})
	}
	cl.Status.ControlPlane = componentVersions(st)
	rt := &upgradeRuntime{}
	r := &Reconciler{Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: rt}, Recorder: events.NewFakeRecorder(10)}
	if _, handled := r.reconcileUpgrade(context.Background(), cl, controlplane.Spec{}, st, nil, func() error { return nil }); !handled {
		t.Fatal("no step taken")
	}
	if len(rt.steps) != 1 || rt.steps[0] != controlplane.APIServer {
		t.Fatalf("steps %v, want the API server", rt.steps)
	}
	got := startVersions(cl)
	if got[controlplane.APIServer] != cur || got[controlplane.ControllerManager] != old {
		t.Errorf("a manager restarted now would start %v", got)
	}
}

// TestUpgradeStepWaitsForAWrittenStatus: a step starts only once its
// status is recorded; a write refused (the cluster read was not the
// newest) leaves the step to the next reconcile, which reads anew.
func TestUpgradeStepWaitsForAWrittenStatus(t *testing.T) {
	const old, cur = "v1.36.3", "v1.37.2"
	cl := &fkev1.Cluster{Spec: fkev1.ClusterSpec{Version: cur}}
	cl.Status.Upgrade = &fkev1.UpgradeStatus{From: old, To: cur, Snapshot: "20261201T120000Z", StartTime: metav1.Now()}
	st := controlplane.Status{Components: []controlplane.ComponentStatus{
		{Name: controlplane.APIServer, Version: old, Running: true, Ready: true},
		{Name: controlplane.ControllerManager, Version: old, Running: true, Ready: true},
		{Name: controlplane.Scheduler, Version: old, Running: true, Ready: true},
	}}
	rt := &upgradeRuntime{}
	r := &Reconciler{Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: rt}, Recorder: events.NewFakeRecorder(10)}
	conflict := apierrors.NewConflict(fkev1.GroupVersion.WithResource("clusters").GroupResource(), "c", errors.New("the object has been modified"))
	after, handled := r.reconcileUpgrade(context.Background(), cl, controlplane.Spec{}, st, nil, func() error { return conflict })
	if !handled || after != conflictRetry {
		t.Errorf("handled %v, again in %s; want handled, again in %s", handled, after, conflictRetry)
	}
	if len(rt.steps) != 0 {
		t.Errorf("steps %v taken on a status that could not be written", rt.steps)
	}
}

// TestPatchStatusRefusesAStaleRead: a status computed from a cluster read
// before another write is refused, not merged: the merge patch carries
// whole lists, and would put back an Upgrading condition already over
// (a cluster whose upgrade finished read as still upgrading).
func TestPatchStatusRefusesAStaleRead(t *testing.T) {
	ctx := context.Background()
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "up"}}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cl).WithStatusSubresource(cl).Build()
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10)}

	stale := &fkev1.Cluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cl), stale); err != nil {
		t.Fatal(err)
	}
	setUpgrading(stale, metav1.ConditionTrue, "UpgradingScheduler", "step 4 of 5")

	done := stale.DeepCopy()
	before := done.DeepCopy()
	setUpgrading(done, metav1.ConditionFalse, fkev1.ReasonUpgraded, "upgraded")
	if err := r.patchStatus(ctx, before, done); err != nil {
		t.Fatal(err)
	}

	old := stale.DeepCopy()
	meta.SetStatusCondition(&stale.Status.Conditions, metav1.Condition{Type: fkev1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready"})
	if err := r.patchStatus(ctx, old, stale); !apierrors.IsConflict(err) {
		t.Fatalf("a status from a stale read: %v, want a conflict", err)
	}
	got := &fkev1.Cluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cl), got); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, fkev1.ConditionUpgrading); cond == nil || cond.Reason != fkev1.ReasonUpgraded {
		t.Errorf("Upgrading condition %+v, want %s", cond, fkev1.ReasonUpgraded)
	}
}
