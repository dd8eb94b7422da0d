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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeprovider/kwok"
	"fke.dev/fke/test/testenv"
)

// TestAutoscalerRolloutWaitsForTerminatingPods: 40 pods × 1 GPU fill 5
// gpu-h100x8 nodes. The Deployment is deleted and created again at once,
// before the garbage collector has marked the old pods terminating, and
// they stay Terminating for 20 s (as pods whose containers take that long
// to stop; their deadline is 30 s of grace plus the margin): the new pods
// wait for the room the old ones free (Nominated), the pool never grows
// past 5 machines, and all 40 new pods run.
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
	peak := watchMachines(t, e.Client(), "gpu")
	start := time.Now()
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "roll", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Created again at once: the garbage collector has not marked the old
	// pods terminating yet (it does within a second or so), but their
	// controller is gone, so they count as leaving from now.
	testenv.Eventually(t, 30*time.Second, "creating deployment roll again", func() error {
		_, err := cs.AppsV1().Deployments("default").Create(ctx, rolloutDeployment("roll", replicas, stopTime), metav1.CreateOptions{})
		return err
	})
	if pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=roll"}); err == nil {
		live := 0
		for _, p := range pods.Items {
			if oldUIDs[p.UID] && p.DeletionTimestamp == nil {
				live++
			}
		}
		t.Logf("deployment created again %s after the delete; %d of %d old pods not yet terminating", time.Since(start).Round(time.Millisecond), live, replicas)
	}
	// The case only means something if new pods found the nodes full of
	// terminating ones: they must be told they wait for that room.
	testenv.Eventually(t, 60*time.Second, "a new pod Nominated to the room of terminating pods", func() error {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=Nominated"})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, "terminating") {
				return nil
			}
		}
		return fmt.Errorf("%d Nominated events, none about terminating pods", len(evs.Items))
	})
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
