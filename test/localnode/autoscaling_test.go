package localnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/test/testenv"
)

// TestWorkloadAutoscaling: metrics-server, run by fke beside the control
// plane of a cluster with one local node, scrapes the real kubelet: `kubectl
// top nodes` and `kubectl top pods` answer, and a HorizontalPodAutoscaler on
// CPU utilization scales a Deployment of demo servers from 1 to 3 replicas
// while the test makes them burn CPU. The addon is repaired when its
// APIService is deleted and removed when turned off.
func TestWorkloadAutoscaling(t *testing.T) {
	requireNodeTools(t)
	e := upForLocalNodes(t)
	t.Cleanup(func() { dumpMetricsServerLog(t, e) })
	e.MustRun("cluster", "create", "demo", "--wait")
	start := time.Now()
	mc := e.Client()
	// On by default, before any node exists.
	e.WaitAddon("demo", addons.MetricsServerName, fkev1.AddonReady, time.Minute)
	t.Logf("FIGURE cluster Ready -> metrics-server Ready (APIService Available): %s", time.Since(start).Round(10*time.Millisecond))
	registry := e.WaitSystemImages()
	ctx := t.Context()
	cfg := e.TenantConfig("demo")
	cs := e.Tenant("demo")
	metrics, err := metricsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ag, err := aggregator.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// gpu-metrics, also on by default, may still be starting: AddonsReady
	// speaks for both.
	e.WaitAddon("demo", addons.GPUMetricsName, fkev1.AddonReady, time.Minute)
	cl := getCluster(t, mc)
	if c := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionAddonsReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("AddonsReady = %+v, want True", c)
	}
	if out := e.MustRun("cluster", "get", "demo"); !strings.Contains(out, "metrics-server") || !strings.Contains(out, "serves "+addons.MetricsAPIService) {
		t.Errorf("fke cluster get does not show the addon:\n%s", out)
	}

	start = time.Now()
	e.MustRun("nodepool", "create", "demo/cpu", "--provider", "local", "--instance-type", "cpu-small", "--replicas", "1", "--wait")
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("nodes: %v, %v", nodes, err)
	}
	node := nodes.Items[0]
	testenv.Eventually(t, 2*time.Minute, "node metrics of "+node.Name, func() error {
		m, err := metrics.MetricsV1beta1().NodeMetricses().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if m.Usage.Cpu().IsZero() || m.Usage.Memory().IsZero() {
			return fmt.Errorf("usage %v", m.Usage)
		}
		return nil
	})
	t.Logf("FIGURE pool create -> node metrics served: %s", time.Since(start).Round(10*time.Millisecond))
	kubectl := kubectlFor(t, e)
	if out := kubectl("top", "nodes"); !strings.Contains(out, node.Name) || !strings.Contains(out, "CPU(cores)") {
		t.Errorf("kubectl top nodes:\n%s", out)
	}

	deploy := burnerDeployment(image.DemoServer.Ref(registry))
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := expose(t, cs, "burner")
	hpa := cpuHPA("burner", 50, 1, 3)
	if _, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "burner pod metrics", func() error {
		list, err := metrics.MetricsV1beta1().PodMetricses("default").List(ctx, metav1.ListOptions{LabelSelector: "app=burner"})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return errors.New("no pod metrics yet")
		}
		return nil
	})
	if out := kubectl("top", "pods", "-l", "app=burner"); !strings.Contains(out, "burner-") {
		t.Errorf("kubectl top pods:\n%s", out)
	}

	// Load: CPU-bound requests through the NodePort, spread over the pods.
	url := fmt.Sprintf("http://%s/burn?ms=1000", net.JoinHostPort(internalIP(&node), strconv.Itoa(int(svc.Spec.Ports[0].NodePort))))
	stop := burn(ctx, url, 3)
	defer stop()
	start = time.Now()
	testenv.Eventually(t, 4*time.Minute, "HPA scales burner to 3 ready replicas", func() error {
		h, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "burner", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "burner", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != 3 {
			return fmt.Errorf("%d ready replicas; HPA desired %d, current metrics %s, conditions %s",
				d.Status.ReadyReplicas, h.Status.DesiredReplicas, hpaMetrics(h), hpaConditions(h))
		}
		return nil
	})
	t.Logf("FIGURE CPU load on -> HPA scaled the Deployment 1 -> 3 ready replicas: %s (HPA sync period 15s, metric resolution %s)",
		time.Since(start).Round(10*time.Millisecond), addons.MetricResolution)
	stop()

	t.Run("a deleted APIService is put back", func(t *testing.T) {
		old, err := ag.ApiregistrationV1().APIServices().Get(ctx, addons.MetricsAPIService, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := ag.ApiregistrationV1().APIServices().Delete(ctx, addons.MetricsAPIService, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		testenv.Eventually(t, time.Minute, "APIService made again and node metrics served", func() error {
			svc, err := ag.ApiregistrationV1().APIServices().Get(ctx, addons.MetricsAPIService, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if svc.UID == old.UID {
				return errors.New("the old APIService is still there")
			}
			_, err = metrics.MetricsV1beta1().NodeMetricses().Get(ctx, node.Name, metav1.GetOptions{})
			return err
		})
		t.Logf("FIGURE APIService deleted -> made again, metrics served (manager polls every 10s): %s", time.Since(start).Round(10*time.Millisecond))
	})

	t.Run("turned off, it is removed; turned on, it comes back", func(t *testing.T) {
		e := e.For(t)
		setMetricsServer(t, mc, false)
		testenv.Eventually(t, time.Minute, "metrics-server removed", func() error {
			cl := getCluster(t, mc)
			if _, err := ag.ApiregistrationV1().APIServices().Get(ctx, addons.MetricsAPIService, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("APIService still there (%v)", err)
			}
			for _, a := range cl.Status.Addons {
				if a.Name == addons.MetricsServerName {
					return fmt.Errorf("status.addons %+v", cl.Status.Addons)
				}
			}
			if !meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionAddonsReady) {
				return fmt.Errorf("AddonsReady %+v", meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionAddonsReady))
			}
			return nil
		})
		if pids := processesOf(t, filepath.Join(e.DataDir, "clusters", "default", "demo", "addons", addons.MetricsServerName)); len(pids) > 0 {
			t.Errorf("metrics-server still runs: %v", pids)
		}
		if out, err := kubectlRun(t, e, "top", "nodes"); err == nil {
			t.Errorf("kubectl top nodes works without metrics-server:\n%s", out)
		}
		// The HPA says why it cannot scale, and the cluster goes on.
		testenv.Eventually(t, time.Minute, "HPA reports metrics unavailable", func() error {
			h, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "burner", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range h.Status.Conditions {
				if c.Type == autoscalingv2.ScalingActive && c.Status == corev1.ConditionFalse {
					return nil
				}
			}
			return fmt.Errorf("conditions %s", hpaConditions(h))
		})
		setMetricsServer(t, mc, true)
		e.WaitAddon("demo", addons.MetricsServerName, fkev1.AddonReady, time.Minute)
	})
}

// burnerDeployment runs one demo server asking for a tenth of a CPU and
// allowed a fifth, so that a few busy replicas do not starve the host.
func burnerDeployment(img string) *appsv1.Deployment {
	labels := map[string]string{"app": "burner"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "burner"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name: "server", Image: img,
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
						},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1},
					}},
				},
			},
		},
	}
}

// cpuHPA scales the Deployment name between lo and hi replicas to keep its
// CPU use at target percent of its request.
func cpuHPA(name string, target, lo, hi int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To(lo),
			MaxReplicas:    hi,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricSource{
					Name:   corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(target)},
				},
			}},
		},
	}
}

// burn keeps n requests to url in flight until stop is called or ctx ends.
func burn(ctx context.Context, url string, n int) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	c := &http.Client{Timeout: 30 * time.Second}
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err != nil {
					return
				}
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
				} else {
					select {
					case <-ctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
		})
	}
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}

func hpaMetrics(h *autoscalingv2.HorizontalPodAutoscaler) string {
	var out []string
	for _, m := range h.Status.CurrentMetrics {
		if m.Resource != nil && m.Resource.Current.AverageUtilization != nil {
			out = append(out, fmt.Sprintf("%s %d%%", m.Resource.Name, *m.Resource.Current.AverageUtilization))
		}
	}
	return strings.Join(out, ", ")
}

func hpaConditions(h *autoscalingv2.HorizontalPodAutoscaler) string {
	var out []string
	for _, c := range h.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, "; ")
}

func getCluster(t *testing.T, c client.Client) *fkev1.Cluster {
	t.Helper()
	cl := &fkev1.Cluster{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "demo"}, cl); err != nil {
		t.Fatal(err)
	}
	return cl
}

func setMetricsServer(t *testing.T, c client.Client, on bool) {
	t.Helper()
	cl := getCluster(t, c)
	before := cl.DeepCopy()
	cl.Spec.Addons.MetricsServer.Enabled = ptr.To(on)
	if err := c.Patch(t.Context(), cl, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
}

// kubectlFor returns a runner of the built kubectl against the cluster demo
// that fails the test when kubectl fails.
func kubectlFor(t *testing.T, e *testenv.Env) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		out, err := kubectlRun(t, e, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
}

func kubectlRun(t *testing.T, e *testenv.Env, args ...string) (string, error) {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "demo.kubeconfig")
	if err := os.WriteFile(kc, []byte(e.MustRun("kubeconfig", "demo")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), filepath.Join(e.BinDir, "kubectl"), append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
	return string(out), err
}

// dumpMetricsServerLog prints the end of metrics-server's log when the test failed.
func dumpMetricsServerLog(t *testing.T, e *testenv.Env) {
	if !t.Failed() {
		return
	}
	data, err := os.ReadFile(filepath.Join(e.DataDir, "clusters", "default", "demo", "logs", addons.MetricsServerName+".log"))
	if err != nil {
		t.Logf("metrics-server log: %v", err)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	t.Logf("---- metrics-server log ----\n%s", strings.Join(lines, "\n"))
}
