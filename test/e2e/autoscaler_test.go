package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/test/testenv"
)

// TestAutoscalerGPUPool: a GPU pool 0..4 grows to exactly the nodes three
// 8-GPU pods need, never more, and goes back to zero once they are gone; a
// CPU-only pod never grows it.
func TestAutoscalerGPUPool(t *testing.T) {
	e := testenv.Up(t)
	ctx := context.Background()
	e.MustRun("cluster", "create", "demo", "--wait",
		"--nodepool", "name=gpu,type=gpu-h100x8,min=0,max=4,unneeded=5s")
	cs := e.Tenant("demo")

	// Watch the node count for the whole test: it must never exceed 3.
	var mu sync.Mutex
	maxNodes := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var ms fkev1.MachineList
			if err := e.Client().List(ctx, &ms, client.MatchingLabels{fkev1.LabelNodePool: "gpu"}); err == nil {
				mu.Lock()
				maxNodes = max(maxNodes, len(ms.Items))
				mu.Unlock()
			}
		}
	}()
	defer func() { close(stop); <-done }()

	deployGPU(t, cs, "trainer", 3, 8)
	testenv.Eventually(t, 90*time.Second, "3 trainer pods Running", func() error {
		return podsRunning(cs, "app=trainer", 3)
	})
	if n := len(poolNodes(t, cs, "gpu")); n != 3 {
		t.Fatalf("GPU pool has %d nodes, want exactly 3", n)
	}
	np := &fkev1.NodePool{}
	if err := e.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo.gpu"}, np); err != nil {
		t.Fatal(err)
	}
	if d := np.Status.LastScaleDecision; d == nil || d.To != 3 {
		t.Errorf("last scale decision = %+v, want one that reached 3", d)
	}
	out := e.MustRun("nodepool", "get", "demo/gpu")
	if !strings.Contains(out, "TriggeredScaleUp") {
		t.Errorf("nodepool get shows no TriggeredScaleUp event:\n%s", out)
	}
	if !hasPodEvent(t, cs, "app=trainer", "TriggeredScaleUp") {
		t.Error("no TriggeredScaleUp event on the trainer pods")
	}

	// A pending CPU-only pod never grows the GPU pool.
	createPod(t, cs, "cpu-only", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")})
	testenv.Eventually(t, 30*time.Second, "NotTriggerScaleUp on the CPU-only pod", func() error {
		if !hasEvent(cs, "cpu-only", "NotTriggerScaleUp") {
			return fmt.Errorf("no event yet")
		}
		return nil
	})
	if err := cs.CoreV1().Pods("default").Delete(ctx, "cpu-only", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Without the deployment the pool goes back to zero after the unneeded time.
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "trainer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "GPU pool back to 0", func() error {
		if n := len(poolNodes(t, cs, "gpu")); n != 0 {
			return fmt.Errorf("%d nodes left", n)
		}
		if err := e.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo.gpu"}, np); err != nil {
			return err
		}
		if ptr.Deref(np.Spec.Replicas, -1) != 0 {
			return fmt.Errorf("replicas %d", ptr.Deref(np.Spec.Replicas, -1))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if maxNodes != 3 {
		t.Fatalf("the pool reached %d machines, want exactly 3 (no duplicates)", maxNodes)
	}
}

// TestAutoscalerPriceExpander: with the price expander the cheapest instance
// type that fits is chosen.
func TestAutoscalerPriceExpander(t *testing.T) {
	e := testenv.Up(t)
	e.MustRun("cluster", "create", "demo", "--wait", "--expander", "price",
		"--nodepool", "name=h100,type=gpu-h100x8,min=0,max=2",
		"--nodepool", "name=a100,type=gpu-a100x1,min=0,max=2",
		"--nodepool", "name=l4,type=gpu-l4x1,min=0,max=2")
	cs := e.Tenant("demo")
	deployGPU(t, cs, "infer", 1, 1)
	testenv.Eventually(t, 90*time.Second, "inference pod Running", func() error {
		return podsRunning(cs, "app=infer", 1)
	})
	if l4, a100, h100 := len(poolNodes(t, cs, "l4")), len(poolNodes(t, cs, "a100")), len(poolNodes(t, cs, "h100")); l4 != 1 || a100 != 0 || h100 != 0 {
		t.Fatalf("nodes l4=%d a100=%d h100=%d, want only the cheapest (l4) to grow", l4, a100, h100)
	}
}

func deployGPU(t *testing.T, cs kubernetes.Interface, name string, replicas int32, gpus int64) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "main", Image: "registry.local/" + name + ":1",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
						"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI),
					}},
				}}},
			},
		},
	}
	testenv.Eventually(t, 30*time.Second, "creating deployment "+name, func() error {
		_, err := cs.AppsV1().Deployments("default").Create(context.Background(), d, metav1.CreateOptions{})
		return err
	})
}

func podsRunning(cs kubernetes.Interface, selector string, want int) error {
	pods, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err
	}
	running := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	if running != want {
		return fmt.Errorf("%d of %d pods Running", running, want)
	}
	return nil
}

func hasPodEvent(t *testing.T, cs kubernetes.Interface, selector, reason string) bool {
	t.Helper()
	pods, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if hasEvent(cs, p.Name, reason) {
			return true
		}
	}
	return false
}

func hasEvent(cs kubernetes.Interface, pod, reason string) bool {
	evs, err := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason,
	})
	return err == nil && len(evs.Items) > 0
}
