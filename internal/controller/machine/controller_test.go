package machine

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestNodeHandlerLetsNewNodesSettle(t *testing.T) {
	node := func(ready corev1.ConditionStatus) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationMachine: "default/m1"}}}
		if ready != "" {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
		}
		return n
	}
	tests := []struct {
		name  string
		node  *corev1.Node
		delay time.Duration // 0: at once
	}{
		{"ready node", node(corev1.ConditionTrue), 0},
		{"node just registered, no conditions yet", node(""), NodeSettle},
		{"node not ready", node(corev1.ConditionFalse), NodeSettle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var delayed []func()
			var delays []time.Duration
			r := &Reconciler{NodeEvents: make(chan event.GenericEvent, 1), after: func(d time.Duration, f func()) {
				delays = append(delays, d)
				delayed = append(delayed, f)
			}}
			r.NodeHandler("default/c1", tt.node)
			if tt.delay == 0 {
				if len(delayed) != 0 {
					t.Fatalf("reconcile delayed by %v, want at once", delays)
				}
			} else {
				if len(r.NodeEvents) != 0 || len(delays) != 1 || delays[0] != tt.delay {
					t.Fatalf("sent at once: %v, delays %v; want one reconcile after %s", len(r.NodeEvents) != 0, delays, tt.delay)
				}
				delayed[0]()
			}
			select {
			case ev := <-r.NodeEvents:
				if ev.Object.GetNamespace() != "default" || ev.Object.GetName() != "m1" {
					t.Fatalf("reconciles %s/%s, want default/m1", ev.Object.GetNamespace(), ev.Object.GetName())
				}
			default:
				t.Fatal("no reconcile of the machine")
			}
		})
	}
}

// TestNodeHandlerKwokAnnotation: the kwok provider's annotation names the
// machine alone; the machine is in the namespace of the node's cluster.
func TestNodeHandlerKwokAnnotation(t *testing.T) {
	r := &Reconciler{NodeEvents: make(chan event.GenericEvent, 1)}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationMachine: "m1"}}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	r.NodeHandler("team/c1", n)
	select {
	case ev := <-r.NodeEvents:
		if ev.Object.GetNamespace() != "team" || ev.Object.GetName() != "m1" {
			t.Fatalf("reconciles %s/%s, want team/m1", ev.Object.GetNamespace(), ev.Object.GetName())
		}
	default:
		t.Fatal("no reconcile of the machine")
	}
}
