package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeprovider/kwok"
	"fke.dev/fke/test/testenv"
)

// TestAutoscalerRolloutWaitsForTerminatingPods: 40 pods × 1 GPU fill 5
// gpu-h100x8 nodes. The Deployment is deleted and created again at once;
// the garbage collector's deletes of the old pods are held until the new
// pods were found waiting (their controller is gone, so they count as
// leaving), then the old pods stay Terminating for 20 s (as pods whose
// containers take that long to stop; their deadline is 30 s of grace plus
// the margin): the new pods wait for the room the old ones free
// (Nominated), the pool never grows past 5 machines, and all 40 new pods
// run.
func TestAutoscalerRolloutWaitsForTerminatingPods(t *testing.T) {
	const (
		replicas = 40
		nodes    = 5
		stopTime = 20 * time.Second
	)
	e := testenv.Up(t)
	ctx := context.Background()
	e.MustRun("cluster", "create", "demo", "--wait", "--nodepool", "name=gpu,type=gpu-h100x8,min=0,max=10")
	cs := e.Tenant("demo")

	d := rolloutDeployment("roll", replicas, stopTime)
	testenv.Eventually(t, 30*time.Second, "creating deployment roll", func() error {
		_, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
		return err
	})
	testenv.Eventually(t, 120*time.Second, "40 pods Running", func() error {
		return rolloutRunning(cs, "app=roll", replicas, nil)
	})
	if n := len(poolNodes(t, cs, "gpu")); n != nodes {
		t.Fatalf("GPU pool has %d nodes for %d pods × 1 GPU, want %d", n, replicas, nodes)
	}

	old, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=roll"})
	if err != nil {
		t.Fatal(err)
	}
	oldUIDs := map[types.UID]bool{}
	for _, p := range old.Items {
		oldUIDs[p.UID] = true
	}
	// The garbage collector marks the old pods terminating about a second
	// after the Deployment is deleted; whether a new pod is pending in that
	// window is luck. Its deletes of pods are refused until the new pods
	// were seen waiting, so the window is long and sure: the old pods'
	// controller is gone and none of them is terminating yet.
	release := holdGarbageCollectorPodDeletes(t, e.TenantConfig("demo"), cs, old.Items[0].Name)
	peak := watchMachines(t, e.Client(), "gpu")
	start := time.Now()
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "roll", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "creating deployment roll again", func() error {
		_, err := cs.AppsV1().Deployments("default").Create(ctx, rolloutDeployment("roll", replicas, stopTime), metav1.CreateOptions{})
		return err
	})
	// New pods find the nodes full of old pods, none of them terminating:
	// they must be told they wait for the room of those pods, whose
	// controller is gone, and trigger no scale-up.
	testenv.Eventually(t, 60*time.Second, "the autoscaler's decision for the new pods", func() error {
		nominated, triggered, err := newPodEvents(cs, oldUIDs)
		if err != nil {
			return err
		}
		if triggered > 0 {
			return nil // the check below fails
		}
		if nominated == 0 {
			return fmt.Errorf("no new pod Nominated to the room of the old pods yet")
		}
		return nil
	})
	if _, triggered, err := newPodEvents(cs, oldUIDs); err != nil || triggered > 0 {
		t.Fatalf("new pods triggered %d scale-ups while the old pods' room was coming (%v)", triggered, err)
	}
	if n := terminating(t, cs, oldUIDs); n != 0 {
		t.Fatalf("%d old pods terminating while the garbage collector is held", n)
	}
	if got := peak(); got != nodes {
		t.Fatalf("the pool reached %d machines before any old pod was terminating, want %d (no surplus)", got, nodes)
	}
	t.Logf("new pods Nominated %.1fs after the delete, no old pod terminating yet", time.Since(start).Seconds())
	release()
	testenv.Eventually(t, 120*time.Second, "the 40 new pods Running, the old ones gone", func() error {
		return rolloutRunning(cs, "app=roll", replicas, oldUIDs)
	})
	took := time.Since(start)
	if got := peak(); got != nodes {
		t.Fatalf("the pool reached %d machines during the rollout, want %d (no surplus)", got, nodes)
	}
	if n := len(poolNodes(t, cs, "gpu")); n != nodes {
		t.Fatalf("GPU pool has %d nodes after the rollout, want %d", n, nodes)
	}
	t.Logf("rollout of %d pods: all Running %.1fs after the delete (old pods took %s to stop)", replicas, took.Seconds(), stopTime)
}

// gcUser is the garbage collector's user (kube-controller-manager runs
// with --use-service-account-credentials).
const gcUser = "system:serviceaccount:kube-system:generic-garbage-collector"

// holdGarbageCollectorPodDeletes makes the tenant's API server refuse the
// garbage collector's deletes of pods, with a ValidatingAdmissionPolicy
// whose parameter is a ConfigMap: it returns once such a delete (a dry run
// of pod probe as the garbage collector) is refused, and the function it
// returns lets the deletes through again (the policy applies only while
// its ConfigMap exists).
func holdGarbageCollectorPodDeletes(t *testing.T, cfg *rest.Config, cs kubernetes.Interface, probe string) (release func()) {
	t.Helper()
	ctx := context.Background()
	param := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hold-gc"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, param, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "hold-gc"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("request.userInfo.username != %q", gcUser),
				Message:    "the test holds the garbage collector's pod deletes",
			}},
		},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "hold-gc"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "hold-gc",
			ParamRef:          &admissionregistrationv1.ParamRef{Name: "hold-gc", Namespace: "default", ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction)},
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gcCfg := rest.CopyConfig(cfg)
	gcCfg.Impersonate = rest.ImpersonationConfig{UserName: gcUser}
	gc, err := kubernetes.NewForConfig(gcCfg)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the garbage collector's pod deletes refused", func() error {
		err := gc.CoreV1().Pods("default").Delete(ctx, probe, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "holds the garbage collector") {
			return nil
		}
		return fmt.Errorf("dry-run delete as the garbage collector: %v", err)
	})
	return func() {
		if err := cs.CoreV1().ConfigMaps("default").Delete(ctx, "hold-gc", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// newPodEvents counts the new pods (not in old) told they wait for the
// room of terminating (or leaving) pods, and the TriggeredScaleUp events of
// new pods.
func newPodEvents(cs kubernetes.Interface, old map[types.UID]bool) (nominated, triggered int, err error) {
	evs, err := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Kind != "Pod" || old[ev.InvolvedObject.UID] {
			continue
		}
		switch {
		case ev.Reason == "TriggeredScaleUp":
			triggered++
		case ev.Reason == "Nominated" && strings.Contains(ev.Message, "terminating"):
			nominated++
		}
	}
	return nominated, triggered, nil
}

// terminating counts the pods of old that are terminating.
func terminating(t *testing.T, cs kubernetes.Interface, old map[types.UID]bool) int {
	t.Helper()
	pods, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=roll"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if old[p.UID] && p.DeletionTimestamp != nil {
			n++
		}
	}
	return n
}

// rolloutDeployment is replicas pods × 1 GPU, written as users write GPU
// pods (no toleration), whose pods stay Terminating for stop on kwok nodes.
func rolloutDeployment(name string, replicas int32, stop time.Duration) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{kwok.AnnotationPodDeleteDelay: stop.String()}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "main", Image: "registry.local/" + name + ":1",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
						"nvidia.com/gpu": resource.MustParse("1"),
					}},
				}}},
			},
		},
	}
}

// rolloutRunning is nil when exactly want pods match selector, all Running,
// none terminating and none of the old ones.
func rolloutRunning(cs kubernetes.Interface, selector string, want int, old map[types.UID]bool) error {
	pods, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err
	}
	running, oldLeft := 0, 0
	for _, p := range pods.Items {
		switch {
		case old[p.UID]:
			oldLeft++
		case p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning:
			running++
		}
	}
	if running != want || len(pods.Items) != want {
		return fmt.Errorf("%d of %d pods Running, %d old ones left, %d in all", running, want, oldLeft, len(pods.Items))
	}
	return nil
}

// watchMachines polls the number of Machines of pool until the test ends
// and returns a function giving the highest count seen so far.
func watchMachines(t *testing.T, c client.Client, pool string) func() int {
	var mu sync.Mutex
	peak := 0
	stop, done := make(chan struct{}), make(chan struct{})
	poll := func() {
		var ms fkev1.MachineList
		if err := c.List(context.Background(), &ms, client.MatchingLabels{fkev1.LabelNodePool: pool}); err == nil {
			mu.Lock()
			peak = max(peak, len(ms.Items))
			mu.Unlock()
		}
	}
	poll()
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				poll()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return func() int {
		poll()
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}
