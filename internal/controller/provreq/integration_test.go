package provreq_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	provreqv1 "fke.dev/fke/internal/autoscaler/provreq/v1"
	"fke.dev/fke/internal/controller/provreq"
	"fke.dev/fke/internal/manager"
	"fke.dev/fke/test/testenv"
)

// TestProvisioningRequests runs against a real tenant cluster whose
// ProvisioningRequest, autoscaler, NodePool and Machine controllers run in
// fke-manager: an atomic request that exceeds the pool's max size fails
// without creating anything; one that fits grows the pool to exactly its
// size at once and is provisioned when the nodes are ready; its capacity
// stays booked: a check-capacity request does not find it free, the idle
// nodes are not scaled down, and the request's own pods run there.
func TestProvisioningRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a management plane and a tenant cluster")
	}
	e := testenv.Up(t)
	ctx := context.Background()
	e.MustRun("cluster", "create", "demo", "--nodepool", "name=gpu,type=gpu-h100x8,min=0,max=3,unneeded=2s", "--wait")
	// The manager installed the API when the cluster became ready (and
	// its other addons, metrics-server, a moment later).
	testenv.Eventually(t, 30*time.Second, "AddonsReady", func() error {
		cl := &fkev1.Cluster{}
		if err := e.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo"}, cl); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionAddonsReady) {
			return fmt.Errorf("cluster conditions %+v", cl.Status.Conditions)
		}
		return nil
	})
	start := time.Now()
	if err := addons.EnsureProvisioningRequestAPI(ctx, e.TenantConfig("demo")); err != nil {
		t.Fatalf("second install: %v", err)
	}
	t.Logf("EnsureProvisioningRequestAPI when present: %s", time.Since(start))

	mgmt := e.Client()
	scheme, err := manager.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	// fke-manager runs the ProvisioningRequest controller; nothing runs in
	// the test process but the checks.
	passErr := make(chan error)
	tc, err := client.New(e.TenantConfig("demo"), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, tc, &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "trainer"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "train", Image: "trainer", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")},
			}}},
		}},
	})

	// (a) 4 × 8 GPUs against max 3: Failed, nothing grows.
	mustCreate(t, tc, newRequest("too-big", provreqv1.ClassBestEffortAtomicScaleUp, 4))
	waitCondition(t, tc, passErr, "too-big", provreqv1.Failed, "max size of pool gpu reached: need 4, 3 allowed")
	if n := replicas(t, mgmt); n != 0 {
		t.Fatalf("pool replicas = %d after a failed request, want 0", n)
	}
	if n := machines(t, mgmt); n != 0 {
		t.Fatalf("%d machines after a failed request, want 0", n)
	}

	// (b) 2 × 8 GPUs: the pool goes 0 → 2 in one step, then Provisioned.
	mustCreate(t, tc, newRequest("gang", provreqv1.ClassBestEffortAtomicScaleUp, 2))
	testenv.Eventually(t, 30*time.Second, "pool resized for the gang", func() error {
		if n := replicas(t, mgmt); n != 2 {
			return fmt.Errorf("replicas %d", n)
		}
		return nil
	})
	testenv.Eventually(t, 10*time.Second, "scale decision recorded", func() error {
		np := &fkev1.NodePool{}
		if err := mgmt.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo.gpu"}, np); err != nil {
			return err
		}
		if d := np.Status.LastScaleDecision; d == nil || d.From != 0 || d.To != 2 {
			return fmt.Errorf("last scale decision %+v, want 0 → 2 in one step", d)
		}
		return nil
	})
	waitCondition(t, tc, passErr, "gang", provreqv1.Provisioned, "")
	gang := &provreqv1.ProvisioningRequest{}
	if err := tc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "gang"}, gang); err != nil {
		t.Fatal(err)
	}
	if b, err := provreq.ParseBooking(gang); err != nil || b == nil || b.Pool != "gpu" || b.Nodes != 2 {
		t.Fatalf("booking = %+v, %v; want gpu +2", b, err)
	}
	if n := replicas(t, mgmt); n != 2 {
		t.Fatalf("pool replicas = %d after provisioning, want 2", n)
	}

	// (c) check-capacity for 1 × 8 GPUs: the two empty nodes are booked by
	// the gang, so there is no free capacity and nothing grows.
	mustCreate(t, tc, newRequest("check", provreqv1.ClassCheckCapacity, 1))
	testenv.Eventually(t, 60*time.Second, "check-capacity answered", func() error {
		pr := &provreqv1.ProvisioningRequest{}
		if err := tc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "check"}, pr); err != nil {
			return err
		}
		c := meta.FindStatusCondition(pr.Status.Conditions, provreqv1.Provisioned)
		if c == nil {
			return fmt.Errorf("conditions %+v", pr.Status.Conditions)
		}
		if c.Status != metav1.ConditionFalse || c.Reason != provreq.ReasonCapacityIsNotFound {
			t.Fatalf("check-capacity on booked nodes: %+v, want Provisioned=False/%s", c, provreq.ReasonCapacityIsNotFound)
		}
		return nil
	})

	// (d) The booked nodes are idle, and the pool's unneeded time is 2 s,
	// but they stay while the booking lasts.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if n := replicas(t, mgmt); n != 2 {
			t.Fatalf("pool replicas = %d while the gang's capacity is booked, want 2", n)
		}
	}
	np := &fkev1.NodePool{}
	if err := mgmt.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo.gpu"}, np); err != nil {
		t.Fatal(err)
	}
	if d := np.Status.LastScaleDecision; d == nil || d.To != 2 {
		t.Fatalf("last scale decision %+v, want the gang's 0 → 2", d)
	}

	// (e) The gang's own pods run on the booked nodes without a scale-up.
	for i := range 2 {
		mustCreate(t, tc, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("gang-worker-%d", i),
				Annotations: map[string]string{provreqv1.AnnotationConsumeProvisioningRequest: "gang"}},
			Spec: corev1.PodSpec{
				Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{Name: "train", Image: "trainer", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")},
				}}},
			},
		})
	}
	testenv.Eventually(t, 60*time.Second, "gang pods running", func() error {
		var pods corev1.PodList
		if err := tc.List(ctx, &pods, client.InNamespace("default")); err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, "gang-worker-") && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running != 2 {
			return fmt.Errorf("%d of 2 running", running)
		}
		return nil
	})
	if n := replicas(t, mgmt); n != 2 {
		t.Fatalf("pool replicas = %d with the gang running, want 2", n)
	}
	if n := machines(t, mgmt); n != 2 {
		t.Fatalf("%d machines with the gang running, want 2", n)
	}
	var evs corev1.EventList
	if err := tc.List(ctx, &evs, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]bool{}
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Kind == "ProvisioningRequest" {
			reasons[ev.InvolvedObject.Name+"/"+ev.Reason] = true
		}
	}
	for _, want := range []string{"too-big/CapacityIsNotFound", "gang/TriggeredScaleUp", "gang/CapacityIsProvisioned"} {
		if !reasons[want] {
			t.Errorf("no event %s; have %v", want, reasons)
		}
	}
}

func newRequest(name, class string, count int32) *provreqv1.ProvisioningRequest {
	return &provreqv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: provreqv1.ProvisioningRequestSpec{
			ProvisioningClassName: class,
			PodSets:               []provreqv1.PodSet{{PodTemplateRef: provreqv1.Reference{Name: "trainer"}, Count: count}},
		},
	}
}

func mustCreate(t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), o); err != nil {
		t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

// waitCondition waits until condition typ of request name is True (with
// msg in its message when msg is set); a Failed condition ends the wait early.
func waitCondition(t *testing.T, c client.Client, passErr <-chan error, name, typ, msg string) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, name+" "+typ, func() error {
		select {
		case err := <-passErr:
			t.Logf("reconcile pass: %v", err) // transient (conflicts, caches); passes go on
		default:
		}
		pr := &provreqv1.ProvisioningRequest{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, pr); err != nil {
			return err
		}
		if typ != provreqv1.Failed && meta.IsStatusConditionTrue(pr.Status.Conditions, provreqv1.Failed) {
			t.Fatalf("%s failed: %+v", name, pr.Status.Conditions)
		}
		cnd := meta.FindStatusCondition(pr.Status.Conditions, typ)
		if cnd == nil || cnd.Status != metav1.ConditionTrue {
			return fmt.Errorf("conditions %+v", pr.Status.Conditions)
		}
		if msg != "" && !strings.Contains(cnd.Message, msg) {
			t.Fatalf("%s %s message %q, want it to contain %q", name, typ, cnd.Message, msg)
		}
		return nil
	})
}

func replicas(t *testing.T, c client.Client) int {
	t.Helper()
	np := &fkev1.NodePool{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "demo.gpu"}, np); err != nil {
		t.Fatal(err)
	}
	return int(ptr.Deref(np.Spec.Replicas, 0))
}

func machines(t *testing.T, c client.Client) int {
	t.Helper()
	var ms fkev1.MachineList
	if err := c.List(context.Background(), &ms, client.MatchingLabels{fkev1.LabelNodePool: "gpu"}); err != nil {
		t.Fatal(err)
	}
	return len(ms.Items)
}
