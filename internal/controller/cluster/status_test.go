package cluster

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/versions"
)

// planeStatus is a control plane's status whose components are ready,
// adopting (taken over and not checked yet) or neither, by the letters of
// states: R ready, A adopting, a adopted and ready, S starting.
func planeStatus(states string) controlplane.Status {
	st := controlplane.Status{Endpoint: "https://127.0.0.1:6443"}
	for i, c := range controlplane.Components {
		cs := controlplane.ComponentStatus{Name: c, Running: true, PID: 100 + i, Version: versions.Default}
		switch states[i] {
		case 'R':
			cs.Ready = true
		case 'A':
			cs.Adopted, cs.Adopting = true, true
		case 'a':
			cs.Adopted, cs.Ready = true, true
		}
		st.Components = append(st.Components, cs)
	}
	return st
}

// TestComputeStatusOfAnAdoptedPlane: a ready plane whose processes a
// restarted fke-manager is taking over stays ready, saying so; a plane
// with a component that is not being taken over, or one that was not
// ready before, is reported as before.
func TestComputeStatusOfAnAdoptedPlane(t *testing.T) {
	readyCond := []metav1.Condition{
		{Type: fkev1.ConditionControlPlaneReady, Status: metav1.ConditionTrue, Reason: fkev1.ReasonReady},
		{Type: fkev1.ConditionReady, Status: metav1.ConditionTrue, Reason: fkev1.ReasonReady},
	}
	for _, tc := range []struct {
		name       string
		conditions []metav1.Condition
		phase      string
		st         controlplane.Status
		status     metav1.ConditionStatus
		reason     string
		wantPhase  string
	}{
		{"ready, all being taken over", readyCond, PhaseReady, planeStatus("AAAA"), metav1.ConditionTrue, fkev1.ReasonAdopting, PhaseReady},
		{"ready, some taken over and checked", readyCond, PhaseReady, planeStatus("aaAR"), metav1.ConditionTrue, fkev1.ReasonAdopting, PhaseReady},
		{"ready, one restarting beside those taken over", readyCond, PhaseReady, planeStatus("AASS"), metav1.ConditionFalse, fkev1.ReasonComponentsNotReady, PhaseProvisioning},
		{"taken over and checked", readyCond, PhaseReady, planeStatus("aaaa"), metav1.ConditionTrue, fkev1.ReasonReady, PhaseReady},
		{"never ready, being taken over", nil, PhaseProvisioning, planeStatus("AAAA"), metav1.ConditionFalse, fkev1.ReasonStarting, PhaseProvisioning},
		{"ready, none taken over and not ready", readyCond, PhaseReady, planeStatus("SSSS"), metav1.ConditionFalse, fkev1.ReasonComponentsNotReady, PhaseProvisioning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fkev1.Cluster{Status: fkev1.ClusterStatus{Phase: tc.phase, Conditions: append([]metav1.Condition(nil), tc.conditions...)}}
			computeStatus(cl, tc.st)
			for _, typ := range []string{fkev1.ConditionControlPlaneReady, fkev1.ConditionReady} {
				c := meta.FindStatusCondition(cl.Status.Conditions, typ)
				if c == nil || c.Status != tc.status || c.Reason != tc.reason {
					t.Errorf("%s = %+v, want %s %s", typ, c, tc.status, tc.reason)
				}
			}
			if cl.Status.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", cl.Status.Phase, tc.wantPhase)
			}
		})
	}
}

// statusRuntime reports the status it is given.
type statusRuntime struct {
	controlplane.Runtime
	st controlplane.Status
}

func (f *statusRuntime) Ensure(context.Context, controlplane.Spec) (controlplane.Status, error) {
	return f.st, nil
}

func (f *statusRuntime) Addresses(context.Context, controlplane.Spec) (controlplane.Addresses, error) {
	return controlplane.Addresses{APIServerDNSNames: []string{"kube-apiserver"}}, nil
}

func (f *statusRuntime) EnsureAddons(context.Context, string, []controlplane.Addon) (controlplane.Status, error) {
	return f.st, nil
}

// TestRestartedManagerRaisesNoAlarm: after a restart of fke-manager, a
// ready cluster whose plane it takes over stays Ready (reason Adopting)
// with no Warning event, then Ready again with one event saying which
// processes were taken over; a plane found unready is still reported so.
func TestRestartedManagerRaisesNoAlarm(t *testing.T) {
	ctx := context.Background()
	cl := &fkev1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo", UID: types.UID("uid-demo"), Finalizers: []string{fkev1.ClusterFinalizer}},
		Spec: fkev1.ClusterSpec{Runtime: fkev1.RuntimeHosted, Version: versions.Default,
			Network: fkev1.ClusterNetwork{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16"}},
	}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cl).WithStatusSubresource(cl).Build()
	rt := &statusRuntime{st: planeStatus("RRRR")}
	manager := func() (*Reconciler, *events.FakeRecorder) {
		rec := events.NewFakeRecorder(20)
		return &Reconciler{Client: c, Recorder: rec, Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeHosted: rt}}, rec
	}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "demo"}}
	reconcile := func(r *Reconciler, rec *events.FakeRecorder) (*metav1.Condition, []string) {
		t.Helper()
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		got := &fkev1.Cluster{}
		if err := c.Get(ctx, req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		var evs []string
		for {
			select {
			case e := <-rec.Events:
				evs = append(evs, e)
				continue
			default:
			}
			break
		}
		return meta.FindStatusCondition(got.Status.Conditions, fkev1.ConditionControlPlaneReady), evs
	}

	r, rec := manager()
	if cond, _ := reconcile(r, rec); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("before the restart: ControlPlaneReady %+v, want True", cond)
	}

	// A new manager; the plane's processes are being taken over.
	r, rec = manager()
	rt.st = planeStatus("AAAA")
	cond, evs := reconcile(r, rec)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != fkev1.ReasonAdopting {
		t.Errorf("while taken over: ControlPlaneReady %+v, want True %s", cond, fkev1.ReasonAdopting)
	}
	for _, e := range evs {
		if strings.HasPrefix(e, "Warning") {
			t.Errorf("while taken over: event %q", e)
		}
	}

	rt.st = planeStatus("aaaa")
	cond, evs = reconcile(r, rec)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != fkev1.ReasonReady {
		t.Errorf("taken over: ControlPlaneReady %+v, want True %s", cond, fkev1.ReasonReady)
	}
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal ControlPlaneAdopted") || !strings.Contains(evs[0], "pids [100 101 102 103]") {
		t.Errorf("taken over: events %q, want one ControlPlaneAdopted naming pids 100-103", evs)
	}
	if _, evs = reconcile(r, rec); len(evs) != 0 {
		t.Errorf("the next reconcile: events %q, want none", evs)
	}

	// Found unready: said so, as before.
	rt.st = planeStatus("RRSS")
	cond, evs = reconcile(r, rec)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != fkev1.ReasonComponentsNotReady {
		t.Errorf("unready: ControlPlaneReady %+v, want False %s", cond, fkev1.ReasonComponentsNotReady)
	}
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning ControlPlaneNotReady") {
		t.Errorf("unready: events %q, want one ControlPlaneNotReady", evs)
	}
}
