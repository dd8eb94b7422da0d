package autoscaler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
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
