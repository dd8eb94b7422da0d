package localnode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/demoserver"
	"fke.dev/fke/internal/gpu/labels"
	gpunode "fke.dev/fke/internal/gpu/node"
	"fke.dev/fke/internal/gpumetrics"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/manager"
	"fke.dev/fke/internal/nodetemplate"
	"fke.dev/fke/test/testenv"
)

// TestLocalGPUNodes: a local gpu-h100x8 node on a host without GPUs. fke's
// GPU agent runs on it as a DaemonSet with the simulated H100 machine; the
// real kubelet advertises its 8 GPUs and hands them to containers.
func TestLocalGPUNodes(t *testing.T) {
	requireNodeTools(t)
	if HostHasGPUs() {
		t.Skip("this host has NVIDIA GPUs: the agent would use them, not the simulated machine this test checks")
	}
	t.Setenv(manager.EnvNodeImages, strings.Join(buildImages(t), ","))
	e := upForLocalNodes(t)
	e.MustRun("cluster", "create", "gpu", "--wait")
	registry := e.WaitSystemImages()
	start := time.Now()
	e.MustRun("nodepool", "create", "gpu/h100", "--provider", "local", "--instance-type", "gpu-h100x8", "--replicas", "1")
	cs := e.Tenant("gpu")
	t.Cleanup(func() { dumpAgentLogs(t, cs) })
	node := waitGPUs(t, cs, "h100", 8)
	t.Logf("FIGURE local GPU pool create -> 8 GPUs allocatable: %s", time.Since(start).Round(10*time.Millisecond))
	if node.Labels[labels.Simulated] != "true" || node.Labels[labels.Product] != "NVIDIA-H100-80GB-HBM3" {
		t.Errorf("node labels: %s=%q, %s=%q", labels.Simulated, node.Labels[labels.Simulated], labels.Product, node.Labels[labels.Product])
	}
	testenv.Eventually(t, time.Minute, "the Machine is GPUReady", func() error {
		var ms fkev1.MachineList
		if err := e.Client().List(t.Context(), &ms, client.MatchingLabels{fkev1.LabelNodePool: "h100"}); err != nil {
			return err
		}
		if len(ms.Items) != 1 || !meta.IsStatusConditionTrue(ms.Items[0].Status.Conditions, fkev1.ConditionGPUReady) {
			return fmt.Errorf("machines %d", len(ms.Items))
		}
		return nil
	})
	uuids := agentUUIDs(t, node.Name)
	demo := image.DemoServer.Ref(registry)

	t.Run("a pod given 2 GPUs sees 2 of the node's GPUs; a pod without sees none", func(t *testing.T) {
		two := gpuPod(t, cs, "two", node.Name, demo, 2)
		none := gpuPod(t, cs, "none", node.Name, demo, 0)
		got := demoGPUs(t, two)
		if len(got) != 2 || got[0] == got[1] || !slices.Contains(uuids, got[0]) || !slices.Contains(uuids, got[1]) {
			t.Errorf("the 2-GPU pod sees %v; the node's GPUs are %v", got, uuids)
		}
		if got := demoGPUs(t, none); len(got) != 0 {
			t.Errorf("the pod without GPUs sees %v", got)
		}
	})
	t.Run("the GPU metrics adapter serves a pod's GPUs as its agent reports them", func(t *testing.T) {
		pod := gpuPod(t, cs, "metered", node.Name, demo, 2)
		gpus := demoGPUs(t, pod)
		if len(gpus) != 2 {
			t.Fatalf("the pod sees GPUs %v", gpus)
		}
		agent := agentPod(t, cs, node.Name)
		start := time.Now()
		httpPost(t, fmt.Sprintf("http://%s:9400/mock/utilization?uuid=%s&gpu=90", agent.Status.PodIP, gpus[0]))
		httpPost(t, fmt.Sprintf("http://%s:9400/mock/utilization?uuid=%s&gpu=30", agent.Status.PodIP, gpus[1]))
		// Mean over the pod's two GPUs: utilization (90+30)/2, memory copy (45+15)/2.
		for metric, want := range map[string]string{gpumetrics.GPUUtil: "60", gpumetrics.MemCopyUtil: "30"} {
			testenv.Eventually(t, time.Minute, metric+" of the pod from its agent", func() error {
				raw, err := cs.CoreV1().RESTClient().Get().
					AbsPath("/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/metered/" + metric).DoRaw(t.Context())
				if err != nil {
					return err
				}
				var list struct {
					Items []struct{ Value string } `json:"items"`
				}
				if err := json.Unmarshal(raw, &list); err != nil {
					return err
				}
				if len(list.Items) != 1 || list.Items[0].Value != want {
					return fmt.Errorf("%s", raw)
				}
				return nil
			})
		}
		t.Logf("FIGURE utilization set on the mock GPUs -> served for the pod by the adapter: %s (agents scraped every 5s)", time.Since(start).Round(10*time.Millisecond))
		if err := cs.CoreV1().Pods("default").Delete(t.Context(), "metered", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, "the metered pod gone", func() error {
			if _, err := cs.CoreV1().Pods("default").Get(t.Context(), "metered", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		})
	})
	t.Run("an HPA on DCGM_FI_DEV_GPU_UTIL scales with the utilization the agent reports", func(t *testing.T) {
		agent := agentPod(t, cs, node.Name)
		setAll := func(util int) {
			for _, u := range uuids {
				httpPost(t, fmt.Sprintf("http://%s:9400/mock/utilization?uuid=%s&gpu=%d", agent.Status.PodIP, u, util))
			}
		}
		setAll(90) // every GPU busy: 90 % against a 60 % target
		labels := map[string]string{"app": "busy"}
		deploy := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "busy"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						NodeSelector:                  map[string]string{corev1.LabelHostname: node.Name},
						TerminationGracePeriodSeconds: ptr.To[int64](0),
						Containers: []corev1.Container{{Name: "app", Image: demo, Resources: corev1.ResourceRequirements{
							Limits: corev1.ResourceList{nodetemplate.ResourceGPU: resource.MustParse("1")}}}},
					},
				},
			},
		}
		if _, err := cs.AppsV1().Deployments("default").Create(t.Context(), deploy, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createGPUUtilHPA(t, cs, "busy", 4)
		running := func(want int32) func() error {
			return func() error {
				h, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(t.Context(), "busy", metav1.GetOptions{})
				if err != nil {
					return err
				}
				d, err := cs.AppsV1().Deployments("default").Get(t.Context(), "busy", metav1.GetOptions{})
				if err != nil {
					return err
				}
				if h.Status.DesiredReplicas != want || d.Status.ReadyReplicas != want || d.Status.Replicas != want {
					return fmt.Errorf("HPA desired %d, %d ready of %d; current %+v", h.Status.DesiredReplicas, d.Status.ReadyReplicas, d.Status.Replicas, h.Status.CurrentMetrics)
				}
				return nil
			}
		}
		start := time.Now()
		testenv.Eventually(t, 3*time.Minute, "busy scaled to its maximum of 4", running(4))
		t.Logf("FIGURE local GPUs at 90%% -> HPA at 4 ready replicas (60%% target): %s (HPA sync period 15s)", time.Since(start).Round(10*time.Millisecond))
		setAll(10)
		start = time.Now()
		testenv.Eventually(t, 2*time.Minute, "busy back to 1", running(1))
		t.Logf("FIGURE local GPUs at 10%% -> HPA back to 1 replica: %s", time.Since(start).Round(10*time.Millisecond))
		if err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Delete(t.Context(), "busy", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.AppsV1().Deployments("default").Delete(t.Context(), "busy", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, "the busy pods gone", func() error {
			pods, err := cs.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "app=busy"})
			if err != nil || len(pods.Items) > 0 {
				return fmt.Errorf("%v pods left (%v)", len(pods.Items), err)
			}
			return nil
		})
	})
	t.Run("a Job asking for 8 GPUs waits until the 2-GPU pod is gone", func(t *testing.T) {
		job := gpuJob(t, cs, "eight", 8)
		testenv.Eventually(t, time.Minute, "the 8-GPU pod unschedulable", func() error {
			pods, err := cs.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
			if err != nil || len(pods.Items) != 1 {
				return fmt.Errorf("pods %v, %v", pods, err)
			}
			for _, c := range pods.Items[0].Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return nil
				}
			}
			return fmt.Errorf("phase %s, conditions %v", pods.Items[0].Status.Phase, pods.Items[0].Status.Conditions)
		})
		if err := cs.CoreV1().Pods("default").Delete(t.Context(), "two", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 2*time.Minute, "the 8-GPU Job complete", func() error {
			j, err := cs.BatchV1().Jobs("default").Get(t.Context(), job.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if j.Status.Succeeded != 1 {
				return fmt.Errorf("succeeded %d, failed %d", j.Status.Succeeded, j.Status.Failed)
			}
			return nil
		})
	})
	t.Run("time-slicing: the pool's setting changes without a new node; 4 pods share one GPU", func(t *testing.T) {
		e := e.For(t)
		var np fkev1.NodePool
		key := client.ObjectKey{Namespace: "default", Name: fkev1.NodePoolObjectName("gpu", "h100")}
		if err := e.Client().Get(t.Context(), key, &np); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(np.DeepCopy())
		np.Spec.GPU = &fkev1.NodePoolGPU{TimeSlicingReplicas: 4}
		if err := e.Client().Patch(t.Context(), &np, patch); err != nil {
			t.Fatal(err)
		}
		shared := waitGPUs(t, cs, "h100", 32)
		if shared.UID != node.UID {
			t.Fatalf("node replaced (%s → %s)", node.UID, shared.UID)
		}
		var seen []string
		for i := range 4 {
			p := gpuPod(t, cs, fmt.Sprintf("slice-%d", i), node.Name, demo, 1)
			seen = append(seen, demoGPUs(t, p)...)
		}
		if len(seen) != 4 || seen[0] != seen[1] || seen[1] != seen[2] || seen[2] != seen[3] || !slices.Contains(uuids, seen[0]) {
			t.Errorf("the 4 time-sliced pods see %v, want one GPU of %v in each", seen, uuids)
		}
	})
	t.Run("an XID lowers the Node's allocatable GPUs through the kubelet, and recovery restores them", func(t *testing.T) {
		before := allocatableGPUs(t, cs, node.Name)
		per := before / 8 // replicas per GPU
		agent := agentPod(t, cs, node.Name)
		victim := uuids[7]
		start := time.Now()
		httpPost(t, fmt.Sprintf("http://%s:9400/mock/xid?uuid=%s&xid=79", agent.Status.PodIP, victim))
		testenv.Eventually(t, 30*time.Second, "allocatable lowered", func() error {
			if got := allocatableGPUs(t, cs, node.Name); got != before-per {
				return fmt.Errorf("%d GPUs allocatable, want %d", got, before-per)
			}
			return nil
		})
		t.Logf("FIGURE XID -> allocatable lowered on the Node (real kubelet): %s", time.Since(start).Round(10*time.Millisecond))
		testenv.Eventually(t, time.Minute, "allocatable restored", func() error {
			if got := allocatableGPUs(t, cs, node.Name); got != before {
				return fmt.Errorf("%d GPUs allocatable, want %d", got, before)
			}
			return nil
		})
	})
	t.Run("a health monitor that cannot run shows on the Node", func(t *testing.T) {
		agent := agentPod(t, cs, node.Name)
		monitorFailed := func(want corev1.ConditionStatus) func() error {
			return func() error {
				n, err := cs.CoreV1().Nodes().Get(t.Context(), node.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				for _, c := range n.Status.Conditions {
					if c.Type == gpunode.ConditionMonitorFailed && c.Status == want {
						return nil
					}
				}
				return fmt.Errorf("no %s=%s condition: %v", gpunode.ConditionMonitorFailed, want, n.Status.Conditions)
			}
		}
		httpPost(t, fmt.Sprintf("http://%s:9400/mock/events?fail=true", agent.Status.PodIP))
		testenv.Eventually(t, 30*time.Second, "GPUHealthMonitorFailed True", monitorFailed(corev1.ConditionTrue))
		httpPost(t, fmt.Sprintf("http://%s:9400/mock/events?fail=false", agent.Status.PodIP))
		testenv.Eventually(t, time.Minute, "GPUHealthMonitorFailed False", monitorFailed(corev1.ConditionFalse))
	})
	t.Run("a node whose GPU does not recover is repaired", func(t *testing.T) {
		e := e.For(t)
		var np fkev1.NodePool
		key := client.ObjectKey{Namespace: "default", Name: fkev1.NodePoolObjectName("gpu", "h100")}
		if err := e.Client().Get(t.Context(), key, &np); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(np.DeepCopy())
		np.Spec.Repair.GPUUnhealthyTimeout = &metav1.Duration{Duration: 5 * time.Second}
		if err := e.Client().Patch(t.Context(), &np, patch); err != nil {
			t.Fatal(err)
		}
		agent := agentPod(t, cs, node.Name)
		start := time.Now()
		httpPost(t, fmt.Sprintf("http://%s:9400/mock/lost?uuid=%s&lost=true", agent.Status.PodIP, uuids[6]))
		httpPost(t, fmt.Sprintf("http://%s:9400/mock/xid?uuid=%s&xid=79", agent.Status.PodIP, uuids[6]))
		var replacement corev1.Node
		testenv.Eventually(t, 3*time.Minute, "the node replaced", func() error {
			list, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: fkev1.LabelNodePool + "=h100"})
			if err != nil {
				return err
			}
			for _, n := range list.Items {
				q := n.Status.Allocatable[nodetemplate.ResourceGPU]
				if n.Name != node.Name && q.Value() == 32 && len(list.Items) == 1 {
					replacement = n
					return nil
				}
			}
			return fmt.Errorf("%d nodes", len(list.Items))
		})
		t.Logf("FIGURE unrecoverable GPU -> node repaired (timeout 5s) -> replacement's GPUs allocatable: %s", time.Since(start).Round(10*time.Millisecond))
		testenv.Eventually(t, 30*time.Second, "a Repairing event saying why", func() error {
			var evs eventsv1.EventList
			if err := e.Client().List(t.Context(), &evs, client.InNamespace("default")); err != nil {
				return err
			}
			for _, ev := range evs.Items {
				if ev.Reason == "Repairing" && strings.Contains(ev.Note, "GPUUnhealthy") {
					return nil
				}
			}
			return fmt.Errorf("no Repairing event among %d", len(evs.Items))
		})
		node = replacement
	})
	t.Run("the autoscaler grows a local GPU pool from zero, one node at a time, and removes it when idle", func(t *testing.T) {
		e := e.For(t)
		e.MustRun("nodepool", "create", "gpu/auto", "--provider", "local", "--instance-type", "gpu-h100x8",
			"--min", "0", "--max", "2", "--scale-down-unneeded-time", "5s")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "wants-a-gpu"},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{fkev1.LabelNodePool: "auto"},
				Containers: []corev1.Container{{Name: "app", Image: demo,
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{nodetemplate.ResourceGPU: resource.MustParse("1")}}}},
			},
		}
		if _, err := cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		most := 0
		start := time.Now()
		testenv.Eventually(t, 3*time.Minute, "the GPU pod running on a new node", func() error {
			var ms fkev1.MachineList
			if err := e.Client().List(t.Context(), &ms, client.MatchingLabels{fkev1.LabelNodePool: "auto"}); err != nil {
				return err
			}
			most = max(most, len(ms.Items))
			p, err := cs.CoreV1().Pods("default").Get(t.Context(), pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("phase %s, %d machines", p.Status.Phase, len(ms.Items))
			}
			return nil
		})
		t.Logf("FIGURE pending GPU pod -> local GPU node from zero -> pod running: %s", time.Since(start).Round(10*time.Millisecond))
		if most != 1 {
			t.Errorf("%d machines at most for one pending pod: a second node was added while the first one's GPUs were coming up", most)
		}
		auto := waitGPUs(t, cs, "auto", 8)
		if err := cs.CoreV1().Pods("default").Delete(t.Context(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 3*time.Minute, "the idle GPU node removed with its processes", func() error {
			var ms fkev1.MachineList
			if err := e.Client().List(t.Context(), &ms, client.MatchingLabels{fkev1.LabelNodePool: "auto"}); err != nil {
				return err
			}
			if len(ms.Items) != 0 {
				return fmt.Errorf("%d machines", len(ms.Items))
			}
			if pids := processesOf(t, auto.Name); len(pids) > 0 {
				return fmt.Errorf("processes %v of node %s", pids, auto.Name)
			}
			return nil
		})
	})
	t.Run("the chain on real nodes: GPU load scales the HPA out, the autoscaler adds a local GPU node, and back", func(t *testing.T) {
		e := e.For(t)
		// Pool auto (local gpu-h100x8, 0..2, 5 s unneeded) is at zero again.
		labels := map[string]string{"app": "chain"}
		deploy := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "chain"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						NodeSelector:                  map[string]string{fkev1.LabelNodePool: "auto"},
						TerminationGracePeriodSeconds: ptr.To[int64](0),
						Containers: []corev1.Container{{Name: "app", Image: demo, Resources: corev1.ResourceRequirements{
							Limits: corev1.ResourceList{nodetemplate.ResourceGPU: resource.MustParse("8")}}}},
					},
				},
			},
		}
		if _, err := cs.AppsV1().Deployments("default").Create(t.Context(), deploy, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		machines := func() int {
			var ms fkev1.MachineList
			if err := e.Client().List(t.Context(), &ms, client.MatchingLabels{fkev1.LabelNodePool: "auto"}); err != nil {
				t.Fatal(err)
			}
			return len(ms.Items)
		}
		ready := func(want int32) func() error {
			return func() error {
				d, err := cs.AppsV1().Deployments("default").Get(t.Context(), "chain", metav1.GetOptions{})
				if err != nil {
					return err
				}
				if d.Status.ReadyReplicas != want || d.Status.Replicas != want {
					return fmt.Errorf("%d ready of %d, want %d; %d machines", d.Status.ReadyReplicas, d.Status.Replicas, want, machines())
				}
				return nil
			}
		}
		testenv.Eventually(t, 3*time.Minute, "chain's first pod on a local GPU node from zero", ready(1))
		first := waitGPUs(t, cs, "auto", 8)
		createGPUUtilHPA(t, cs, "chain", 2)
		setNode := func(node string, util int) {
			agent := agentPod(t, cs, node)
			for _, u := range agentUUIDs(t, node) {
				httpPost(t, fmt.Sprintf("http://%s:9400/mock/utilization?uuid=%s&gpu=%d", agent.Status.PodIP, u, util))
			}
		}
		start := time.Now()
		setNode(first.Name, 90) // the pod's 8 GPUs at 90 % against a 60 % target
		testenv.Eventually(t, 4*time.Minute, "two ready replicas, the second on a new local GPU node", ready(2))
		t.Logf("FIGURE local GPUs at 90%% -> HPA 2 replicas, a second local GPU node from the autoscaler, both Running: %s", time.Since(start).Round(10*time.Millisecond))
		if n := machines(); n != 2 {
			t.Errorf("%d machines for two 8-GPU pods, want exactly 2", n)
		}
		start = time.Now()
		setNode(first.Name, 10)
		testenv.Eventually(t, 4*time.Minute, "one replica and one local GPU node again", func() error {
			if err := ready(1)(); err != nil {
				return err
			}
			if n := machines(); n != 1 {
				return fmt.Errorf("%d machines", n)
			}
			return nil
		})
		t.Logf("FIGURE local GPUs at 10%% -> 1 replica and the idle local GPU node removed: %s (5 s unneeded time)", time.Since(start).Round(10*time.Millisecond))
		if err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Delete(t.Context(), "chain", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.AppsV1().Deployments("default").Delete(t.Context(), "chain", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}

// createGPUUtilHPA makes an HPA that holds Deployment name's pods at 60 %
// DCGM_FI_DEV_GPU_UTIL with 1 to max replicas, scaling down without a
// stabilization window.
func createGPUUtilHPA(t *testing.T, cs kubernetes.Interface, name string, max int32) {
	t.Helper()
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    max,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: gpumetrics.GPUUtil},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(resource.MustParse("60"))},
			}}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0)},
			},
		},
	}
	if _, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Create(t.Context(), hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// dumpAgentLogs prints the GPU agents' logs when the test failed.
func dumpAgentLogs(t *testing.T, cs kubernetes.Interface) {
	if !t.Failed() {
		return
	}
	ctx := context.Background()
	pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + addons.GPUAgentName})
	if err != nil {
		t.Logf("listing GPU agents: %v", err)
		return
	}
	for _, p := range pods.Items {
		data, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		t.Logf("---- GPU agent %s on %s (%v) ----\n%s", p.Name, p.Spec.NodeName, err, data)
	}
}

func allocatableGPUs(t *testing.T, cs kubernetes.Interface, node string) int64 {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := n.Status.Allocatable[nodetemplate.ResourceGPU]
	return q.Value()
}

// agentPod returns the running GPU agent pod of node.
func agentPod(t *testing.T, cs kubernetes.Interface, node string) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	testenv.Eventually(t, time.Minute, "the GPU agent running on "+node, func() error {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(t.Context(), metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=" + addons.GPUAgentName, FieldSelector: "spec.nodeName=" + node,
		})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("%d agent pods, none running", len(pods.Items))
	})
	return pod
}

func httpPost(t *testing.T, url string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "POST "+url, func() error {
		c := http.Client{Timeout: 3 * time.Second}
		resp, err := c.Post(url, "", nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("%s: %s", resp.Status, body)
		}
		return nil
	})
}

// HostHasGPUs reports whether this host has an NVIDIA driver.
func HostHasGPUs() bool {
	_, err := exec.LookPath("nvidia-smi")
	return err == nil
}

// waitGPUs waits until the pool's one node is Ready with want nvidia.com/gpu
// allocatable (advertised by the agent through the kubelet).
func waitGPUs(t *testing.T, cs kubernetes.Interface, pool string, want int64) corev1.Node {
	t.Helper()
	var node corev1.Node
	testenv.Eventually(t, 3*time.Minute, fmt.Sprintf("%d GPUs allocatable on the %s node", want, pool), func() error {
		list, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: fkev1.LabelNodePool + "=" + pool})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d nodes", len(list.Items))
		}
		node = list.Items[0]
		q := node.Status.Allocatable[nodetemplate.ResourceGPU]
		if q.Value() != want {
			return fmt.Errorf("node %s: %s GPUs allocatable", node.Name, q.String())
		}
		return nil
	})
	return node
}

// agentUUIDs asks fke-gpu-agent for the GPUs of node's simulated machine.
func agentUUIDs(t *testing.T, node string) []string {
	t.Helper()
	out, err := exec.Command(filepath.Join(testenv.BinDir(t), "fke-gpu-agent"), "info", "-o", "json",
		"--backend", "mock:dgxh100", "--node-name", node).Output()
	if err != nil {
		t.Fatalf("fke-gpu-agent info: %v", err)
	}
	var info struct {
		Devices []struct{ UUID string } `json:"devices"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for _, d := range info.Devices {
		uuids = append(uuids, d.UUID)
	}
	if len(uuids) != 8 {
		t.Fatalf("agent info lists %d GPUs", len(uuids))
	}
	return uuids
}

// gpuPod runs the demo server on node with gpus GPUs (tolerating the GPU
// taint when it asks for none) and waits until it runs.
func gpuPod(t *testing.T, cs kubernetes.Interface, name, node, img string, gpus int64) *corev1.Pod {
	t.Helper()
	c := corev1.Container{Name: "app", Image: img, Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}
	if gpus > 0 {
		c.Resources.Limits = corev1.ResourceList{nodetemplate.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Tolerations:  []corev1.Toleration{{Key: nodetemplate.ResourceGPU.String(), Operator: corev1.TolerationOpExists}},
			Containers:   []corev1.Container{c},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	testenv.Eventually(t, 2*time.Minute, "pod "+name+" running", func() error {
		p, err := cs.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got = p
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return nil
		}
		return fmt.Errorf("phase %s: %v %v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	})
	return got
}

// gpuJob runs the test app's echo with gpus GPUs.
func gpuJob(t *testing.T, cs kubernetes.Interface, name string, gpus int64) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Tolerations:   []corev1.Toleration{{Key: nodetemplate.ResourceGPU.String(), Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{
					Name: "app", Image: appImage, ImagePullPolicy: corev1.PullNever, Args: []string{"echo", "eight GPUs"},
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{nodetemplate.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}},
				}},
			}},
		},
	}
	got, err := cs.BatchV1().Jobs("default").Create(t.Context(), job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// demoGPUs asks the demo server in pod which GPUs it was given.
func demoGPUs(t *testing.T, pod *corev1.Pod) []string {
	t.Helper()
	var info demoserver.Info
	if err := json.Unmarshal([]byte(httpGet(t, "http://"+pod.Status.PodIP+":8080/")), &info); err != nil {
		t.Fatalf("demo server of %s: %v", pod.Name, err)
	}
	return info.GPUs
}
