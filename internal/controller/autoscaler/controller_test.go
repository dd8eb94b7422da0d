package autoscaler

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/event"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

func TestPodHandlerWakes(t *testing.T) {
	unschedulable := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "waiting"},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		}}},
	}
	bound := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bound"},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	running := bound.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	scheduling := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "new"}}

	tests := []struct {
		name    string
		pod     *corev1.Pod
		pending int // unschedulable pods found by the last pass
		wake    bool
	}{
		{"unschedulable pod", unschedulable, 0, true},
		{"pod bound while pods wait", bound, 2, true},
		{"pod bound, nothing waits", bound, 0, false},
		{"running pod while pods wait", running, 2, false},
		{"pod not yet tried by the scheduler", scheduling, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reconciler{Events: make(chan event.GenericEvent, 1), states: map[string]*clusterState{}}
			r.state("default/c1").pending = tt.pending
			r.PodHandler("default/c1", tt.pod)
			select {
			case ev := <-r.Events:
				if !tt.wake {
					t.Fatalf("woke the autoscaler of %s", ev.Object.GetName())
				}
				if ev.Object.GetNamespace() != "default" || ev.Object.GetName() != "c1" {
					t.Fatalf("woke %s/%s, want default/c1", ev.Object.GetNamespace(), ev.Object.GetName())
				}
			default:
				if tt.wake {
					t.Fatal("did not wake the autoscaler")
				}
			}
		})
	}
}

// TestFailedResizeIsDecidedAgain: when a scale-up's size cannot be written,
// its pods get their events and latency again at the next pass, and the
// cluster's autoscaler is woken for that pass.
func TestFailedResizeIsDecidedAgain(t *testing.T) {
	np := testPool(1, 1)
	srv := newPatchServer(t, np)
	srv.fail = errors.New("the server is unavailable")
	r := &Reconciler{Events: make(chan event.GenericEvent, 1), states: map[string]*clusterState{}, podEvents: make(chan podEventReq, 10)}
	r.resizer = newResizer(srv, clocktesting.NewFakePassiveClock(time.Now()))
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c1"}}
	st := r.state("default/c1")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "uid-p"}}

	ev := r.podEvent(nil, st, pod, corev1.EventTypeNormal, "TriggeredScaleUp", "1->2")
	measured := st.toMeasure([]*corev1.Pod{pod})
	if ev == nil || len(measured) != 1 {
		t.Fatal("the first decision for the pod records nothing")
	}
	if r.podEvent(nil, st, pod, corev1.EventTypeNormal, "TriggeredScaleUp", "1->2") != nil || len(st.toMeasure([]*corev1.Pod{pod})) != 0 {
		t.Fatal("the same decision is recorded twice")
	}
	done := false
	r.resize(cl, np, 1, 2, "test", time.Now(), func(context.Context, *fkev1.NodePool, time.Time) { done = true },
		func() { r.retryLater(st, pod.UID) })
	r.resizer.writeNext(context.Background())
	if done {
		t.Fatal("done ran for a size that was not written")
	}
	select {
	case <-r.Events:
	default:
		t.Fatal("the autoscaler was not woken after the failed write")
	}
	r.takeRetries(st)
	if r.podEvent(nil, st, pod, corev1.EventTypeNormal, "TriggeredScaleUp", "1->2") == nil || len(st.toMeasure([]*corev1.Pod{pod})) != 1 {
		t.Fatal("after the failed write the pod's event and latency are not recorded again")
	}
}
