package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/gpumetrics"
	"fke.dev/fke/test/testenv"
)

// TestGPUMetricsHPAOnKwokNodes: the GPU metrics adapter, on by default
// beside the control plane, serves DCGM_FI_DEV_GPU_UTIL for pods on kwok
// GPU nodes from the load their Deployment's fke.dev/simulate-gpu-load
// annotation offers. An HPA holding 60 % utilization per pod scales an
// inference Deployment (one GPU per pod) from 1 to 8 replicas when the load
// steps to 4.5 GPU-equivalents, the node autoscaler grows an l4x1 pool from
// zero to exactly the 8 nodes they need, and dropping the load brings both
// back to one; a VPA on the same Deployment shows recommendations and
// `kubectl top` answers (the three autoscalers together). An HPA naming a
// metric the adapter does not serve says what
// is served; turning the addon off removes it and HPAs report the metric
// unavailable.
func TestGPUMetricsHPAOnKwokNodes(t *testing.T) {
	t.Parallel() // its time is mostly waits: it runs beside another such test
	if testing.Short() {
		t.Skip("starts a management plane and a tenant cluster")
	}
	e := testenv.Up(t)
	ctx := t.Context()
	// The VPA too: the three autoscalers on one workload.
	e.MustRun("cluster", "create", "demo", "--vertical-pod-autoscaler", "--wait")
	t.Cleanup(func() { dumpAddonLog(t, e, addons.GPUMetricsName) })
	start := time.Now()
	mc := e.Client()
	e.WaitAddon("demo", addons.GPUMetricsName, fkev1.AddonReady, time.Minute)
	t.Logf("FIGURE cluster Ready -> gpu-metrics Ready (APIService Available): %s", time.Since(start).Round(10*time.Millisecond))
	e.MustRun("nodepool", "create", "demo/gpu", "--instance-type", "gpu-l4x1", "--min", "0", "--max", "10",
		"--scale-down-unneeded-time", "20s")
	cs := e.Tenant("demo")

	// The API lists every metric the agent exports, for pods.
	out, err := kubectl(t, e, "get", "--raw", "/apis/custom.metrics.k8s.io/v1beta2")
	if err != nil {
		t.Fatalf("discovery: %v\n%s", err, out)
	}
	for _, m := range gpumetrics.Metrics {
		if !strings.Contains(out, `"pods/`+m.Name+`"`) {
			t.Errorf("discovery does not list pods/%s:\n%s", m.Name, out)
		}
	}

	setLoad := func(load string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fkev1.AnnotationSimulateGPULoad, load)
		if _, err := cs.AppsV1().Deployments("default").Patch(ctx, "infer", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, inferDeployment("0.3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A VPA in recommendation-only mode beside the HPA (which owns the
	// replica count): it must show recommendations by the end.
	dyn := dynamic.NewForConfigOrDie(e.TenantConfig("demo"))
	vpa := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
		"metadata": map[string]any{"name": "infer"},
		"spec": map[string]any{
			"targetRef":    map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer"},
			"updatePolicy": map[string]any{"updateMode": "Off"},
		},
	}}
	if _, err := dyn.Resource(vpaGVR).Namespace("default").Create(ctx, vpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	raw := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/" + gpumetrics.GPUUtil
	testenv.Eventually(t, 2*time.Minute, "the inference pod's GPU utilization served", func() error {
		out, err := kubectl(t, e, "get", "--raw", raw+"?labelSelector=app%3Dinfer")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		var list struct {
			Items []struct {
				DescribedObject struct{ Name string } `json:"describedObject"`
				Value           string                `json:"value"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return err
		}
		// 0.3 GPU-equivalents over one pod with one GPU: 30 %.
		if len(list.Items) != 1 || list.Items[0].Value != "30" {
			return fmt.Errorf("items %+v", list.Items)
		}
		return nil
	})
	t.Logf("FIGURE Deployment created (pool at 0 nodes) -> its pod's GPU utilization served: %s", time.Since(start).Round(10*time.Millisecond))

	if _, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Create(ctx, gpuHPA("infer", gpumetrics.GPUUtil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "HPA reads the metric", func() error {
		h, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "infer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(h.Status.CurrentMetrics) == 0 || h.Status.CurrentMetrics[0].Pods == nil {
			return fmt.Errorf("no current metrics; %s", hpaConds(h))
		}
		if v := h.Status.CurrentMetrics[0].Pods.Current.AverageValue.String(); v != "30" {
			return fmt.Errorf("current %s, want 30", v)
		}
		return nil
	})

	start = time.Now()
	setLoad("4.5")
	waitScaled(t, cs, 8, 5*time.Minute)
	t.Logf("FIGURE load 0.3 -> 4.5 GPUs: 8 replicas Running on 8 new-or-kept GPU nodes: %s (HPA sync period 15s)", time.Since(start).Round(10*time.Millisecond))
	if n := gpuNodes(t, cs); n != 8 {
		t.Errorf("%d GPU nodes for 8 one-GPU pods, want exactly 8", n)
	}

	start = time.Now()
	setLoad("0.3")
	waitScaled(t, cs, 1, 3*time.Minute)
	t.Logf("FIGURE load 4.5 -> 0.3 GPUs: 1 replica: %s (scale-down stabilization 0 s)", time.Since(start).Round(10*time.Millisecond))
	testenv.Eventually(t, 3*time.Minute, "the GPU pool back to the one node the pod needs", func() error {
		if n := gpuNodes(t, cs); n != 1 {
			return fmt.Errorf("%d GPU nodes", n)
		}
		return nil
	})
	t.Logf("FIGURE load 4.5 -> 0.3 GPUs: GPU pool back to 1 node: %s (scale-down unneeded time 20s)", time.Since(start).Round(10*time.Millisecond))

	testenv.Eventually(t, 2*time.Minute, "the VPA's recommendation", func() error {
		got, err := dyn.Resource(vpaGVR).Namespace("default").Get(ctx, "infer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if recs, _, _ := unstructured.NestedSlice(got.Object, "status", "recommendation", "containerRecommendations"); len(recs) == 0 {
			return fmt.Errorf("no recommendation yet")
		}
		return nil
	})
	if out, err := kubectl(t, e, "top", "pods", "-l", "app=infer"); err != nil || !strings.Contains(out, "infer-") {
		t.Errorf("kubectl top pods: %v\n%s", err, out)
	}
	t.Run("an HPA on a metric the adapter does not serve says what is served", func(t *testing.T) {
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, renamed(inferDeployment("1"), "other"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Create(ctx, gpuHPA("other", "DCGM_FI_PROF_NOT_EXPORTED"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 2*time.Minute, "FailedGetPodsMetric naming the served metrics", func() error {
			h, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "other", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range h.Status.Conditions {
				if c.Type == autoscalingv2.ScalingActive && c.Status == corev1.ConditionFalse && c.Reason == "FailedGetPodsMetric" &&
					strings.Contains(c.Message, "DCGM_FI_PROF_NOT_EXPORTED") && strings.Contains(c.Message, gpumetrics.GPUUtil) {
					t.Logf("HPA condition: %s", c.Message)
					return nil
				}
			}
			return fmt.Errorf("conditions %s", hpaConds(h))
		})
	})

	t.Run("turned off, the adapter is removed and HPAs report the metric unavailable", func(t *testing.T) {
		e := e.For(t)
		setGPUMetrics(t, mc, false)
		ag, err := aggregator.NewForConfig(e.TenantConfig("demo"))
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, "gpu-metrics removed", func() error {
			if _, err := ag.ApiregistrationV1().APIServices().Get(ctx, addons.CustomMetricsAPIService, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("APIService still there (%v)", err)
			}
			cl := &fkev1.Cluster{}
			if err := mc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo"}, cl); err != nil {
				return err
			}
			if slices.ContainsFunc(cl.Status.Addons, func(a fkev1.AddonStatus) bool { return a.Name == addons.GPUMetricsName }) {
				return fmt.Errorf("status.addons %+v", cl.Status.Addons)
			}
			return nil
		})
		if out, err := kubectl(t, e, "get", "--raw", raw); err == nil {
			t.Errorf("the custom metrics API still answers:\n%s", out)
		}
		testenv.Eventually(t, time.Minute, "HPA reports the metric unavailable", func() error {
			h, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "infer", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range h.Status.Conditions {
				if c.Type == autoscalingv2.ScalingActive && c.Status == corev1.ConditionFalse {
					return nil
				}
			}
			return fmt.Errorf("conditions %s", hpaConds(h))
		})
		// The rest of the cluster goes on: metrics-server still serves.
		if out, err := kubectl(t, e, "get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"); err != nil {
			t.Errorf("metrics-server after the GPU metrics addon went: %v\n%s", err, out)
		}
		setGPUMetrics(t, mc, true)
		e.WaitAddon("demo", addons.GPUMetricsName, fkev1.AddonReady, time.Minute)
	})
}

// inferDeployment is a one-replica inference server asking for one GPU,
// offered load GPU-equivalents.
func inferDeployment(load string) *appsv1.Deployment {
	labels := map[string]string{"app": "infer"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "infer", Annotations: map[string]string{fkev1.AnnotationSimulateGPULoad: load}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "server", Image: "simulated",
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
						Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
					},
				}}},
			},
		},
	}
}

func renamed(d *appsv1.Deployment, name string) *appsv1.Deployment {
	d.Name = name
	labels := map[string]string{"app": name}
	d.Spec.Selector.MatchLabels, d.Spec.Template.Labels = labels, labels
	return d
}

// gpuHPA keeps metric at an average of 60 per pod of Deployment name
// (1-10 replicas), scaling up beyond a 5 % excess (default 10 %) and down
// without the default 5-minute stabilization.
func gpuHPA(name, metric string) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    10,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.PodsMetricSourceType,
				Pods: &autoscalingv2.PodsMetricSource{
					Metric: autoscalingv2.MetricIdentifier{Name: metric},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(resource.MustParse("60"))},
				},
			}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				// 4.5 GPUs over 7 pods is 64.3 % each, within HPA's default
				// tolerance of 10 % of the 60 % target: 7 replicas would
				// stay. At 5 % the HPA takes the eighth.
				ScaleUp:   &autoscalingv2.HPAScalingRules{Tolerance: ptr.To(resource.MustParse("0.05"))},
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0)},
			},
		},
	}
}

// waitScaled waits until the HPA infer wants n replicas and n pods of
// infer are Running and Ready.
func waitScaled(t *testing.T, cs kubernetes.Interface, n int32, timeout time.Duration) {
	t.Helper()
	ctx := t.Context()
	testenv.Eventually(t, timeout, fmt.Sprintf("infer at %d Running replicas", n), func() error {
		h, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "infer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=infer"})
		if err != nil {
			return err
		}
		var running int32
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		if h.Status.DesiredReplicas != n || running != n || int32(len(pods.Items)) != n {
			return fmt.Errorf("HPA desired %d, %d pods, %d running; %s", h.Status.DesiredReplicas, len(pods.Items), running, hpaConds(h))
		}
		return nil
	})
}

// gpuNodes counts the nodes of the pool gpu.
func gpuNodes(t *testing.T, cs kubernetes.Interface) int {
	t.Helper()
	nodes, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: fkev1.LabelNodePool + "=gpu"})
	if err != nil {
		t.Fatal(err)
	}
	return len(nodes.Items)
}

func hpaConds(h *autoscalingv2.HorizontalPodAutoscaler) string {
	var out []string
	for _, c := range h.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, "; ")
}

func setGPUMetrics(t *testing.T, c client.Client, on bool) {
	t.Helper()
	cl := &fkev1.Cluster{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "demo"}, cl); err != nil {
		t.Fatal(err)
	}
	before := cl.DeepCopy()
	cl.Spec.Addons.GPUMetrics.Enabled = ptr.To(on)
	if err := c.Patch(t.Context(), cl, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
}

// dumpAddonLog prints the addon's log when the test failed.
func dumpAddonLog(t *testing.T, e *testenv.Env, addon string) {
	if !t.Failed() {
		return
	}
	data, err := os.ReadFile(filepath.Join(e.DataDir, "clusters", "default", "demo", "logs", addon+".log"))
	if err != nil {
		t.Logf("no log of %s: %v", addon, err)
		return
	}
	if len(data) > 8000 {
		data = data[len(data)-8000:]
	}
	t.Logf("%s log (tail):\n%s", addon, data)
}
