package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeprovider/kwok"
	"fke.dev/fke/test/testenv"
)

// TestNodeRepair: kwok nodes that report NotReady are replaced by
// auto-repair, which stops while too much of the pool is down at once.
func TestNodeRepair(t *testing.T) {
	e := testenv.Up(t)
	ctx := context.Background()
	e.MustRun("cluster", "create", "fix", "--wait")
	e.MustRun("nodepool", "create", "fix/cpu", "--instance-type", "cpu-small", "--replicas", "4", "--wait")
	var np fkev1.NodePool
	key := client.ObjectKey{Namespace: "default", Name: fkev1.NodePoolObjectName("fix", "cpu")}
	if err := e.Client().Get(ctx, key, &np); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(np.DeepCopy())
	np.Spec.Repair.NodeUnhealthyTimeout = &metav1.Duration{Duration: 5 * time.Second}
	if err := e.Client().Patch(ctx, &np, patch); err != nil {
		t.Fatal(err)
	}
	cs := e.Tenant("fix")
	nodes := testenv.WaitReadyNodes(t, cs, 4)

	t.Run("a NotReady node is replaced", func(t *testing.T) {
		e := e.For(t)
		dead := nodes[0]
		start := time.Now()
		stopKubelet(t, cs, dead)
		testenv.Eventually(t, 3*time.Minute, "the dead node replaced", func() error {
			now := testenv.ReadyNodes(t, cs)
			if slices.Contains(now, dead) || len(now) != 4 {
				return fmt.Errorf("Ready nodes %v", now)
			}
			return nil
		})
		t.Logf("FIGURE kwok node NotReady -> replaced by a Ready node (timeout 5s): %s", time.Since(start).Round(100*time.Millisecond))
		waitEvent(t, e, "Repairing", "NodeNotReady")
	})
	t.Run("with half the pool down, repair stops and says so", func(t *testing.T) {
		e := e.For(t)
		nodes := testenv.WaitReadyNodes(t, cs, 4)
		down := nodes[:2]
		for _, n := range down {
			stopKubelet(t, cs, n)
		}
		testenv.Eventually(t, 3*time.Minute, "RepairBlocked", func() error {
			var np fkev1.NodePool
			if err := e.Client().Get(ctx, key, &np); err != nil {
				return err
			}
			c := meta.FindStatusCondition(np.Status.Conditions, fkev1.ConditionRepairBlocked)
			if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "2 of 4 machines are unhealthy") {
				return fmt.Errorf("condition %+v", c)
			}
			return nil
		})
		waitEvent(t, e, "RepairBlocked", "maxUnhealthy")
		// Both are still there: nothing was replaced.
		var ms fkev1.MachineList
		if err := e.Client().List(ctx, &ms, client.MatchingLabels{fkev1.LabelCluster: "fix"}); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range ms.Items {
			if m.DeletionTimestamp == nil {
				names = append(names, m.Status.NodeName)
			}
		}
		for _, n := range down {
			if !slices.Contains(names, n) {
				t.Errorf("node %s was replaced while repair was blocked (machines' nodes %v)", n, names)
			}
		}
		// One comes back: the other one is repaired.
		startKubelet(t, cs, down[0])
		testenv.Eventually(t, 3*time.Minute, "the remaining dead node replaced", func() error {
			now := testenv.ReadyNodes(t, cs)
			if slices.Contains(now, down[1]) || !slices.Contains(now, down[0]) || len(now) != 4 {
				return fmt.Errorf("Ready nodes %v", now)
			}
			return nil
		})
	})
}

// stopKubelet makes node report NotReady, as a kubelet whose runtime broke
// (fke's simulated fault for kwok nodes).
func stopKubelet(t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	v := "true"
	annotate(t, cs, node, &v)
}

// startKubelet clears the fault: the node reports Ready again.
func startKubelet(t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	annotate(t, cs, node, nil)
}

func annotate(t *testing.T, cs kubernetes.Interface, node string, value *string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{kwok.AnnotationSimulateNotReady: value}}})
	if _, err := cs.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitEvent waits for a management event with reason whose note contains text.
func waitEvent(t *testing.T, e *testenv.Env, reason, text string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "event "+reason, func() error {
		var evs eventsv1.EventList
		if err := e.Client().List(context.Background(), &evs, client.InNamespace("default")); err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Reason == reason && strings.Contains(ev.Note, text) {
				return nil
			}
		}
		return fmt.Errorf("no %s event about %q among %d", reason, text, len(evs.Items))
	})
}
