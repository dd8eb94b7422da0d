package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"

	"fke.dev/fke/internal/nodeprovider/kwok"
	"fke.dev/fke/test/testenv"
)

// TestHPAOnKwokNodes: on a cluster with only kwok nodes, metrics-server
// (beside the control plane) scrapes kwok's simulated kubelet resource
// metrics: pods use what their kwok.x-k8s.io/usage-cpu annotation says,
// `kubectl top` shows it, and a HorizontalPodAutoscaler on CPU utilization
// scales the Deployment as that use asks (1 -> 4 replicas at 200m used of
// 100m requested, target 50%).
func TestHPAOnKwokNodes(t *testing.T) {
	t.Parallel() // its time is mostly waits: it runs beside another such test
	if testing.Short() {
		t.Skip("starts a management plane and a tenant cluster")
	}
	e := testenv.Up(t)
	ctx := t.Context()
	e.MustRun("cluster", "create", "demo", "--nodepool", "name=cpu,type=cpu-small,replicas=1", "--wait")
	cs := e.Tenant("demo")
	metrics, err := metricsclient.NewForConfig(e.TenantConfig("demo"))
	if err != nil {
		t.Fatal(err)
	}

	labels := map[string]string{"app": "sim"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "sim"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					kwok.AnnotationUsageCPU: "200m", kwok.AnnotationUsageMemory: "48Mi",
				}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "simulated",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
					}},
				}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testenv.Eventually(t, 2*time.Minute, "pod metrics of sim", func() error {
		list, err := metrics.MetricsV1beta1().PodMetricses("default").List(ctx, metav1.ListOptions{LabelSelector: "app=sim"})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || len(list.Items[0].Containers) != 1 {
			return fmt.Errorf("pod metrics %+v", list.Items)
		}
		usage := list.Items[0].Containers[0].Usage
		// The rate of simulated CPU time may be off by a scrape's jitter.
		if cpu := usage.Cpu().MilliValue(); cpu < 180 || cpu > 220 {
			return fmt.Errorf("cpu %dm, want about 200m", cpu)
		}
		if mem := usage.Memory().Value(); mem != 48<<20 {
			return fmt.Errorf("memory %d, want 48Mi", mem)
		}
		return nil
	})
	t.Logf("FIGURE kwok pod created -> its metrics served: %s", time.Since(start).Round(10*time.Millisecond))
	out, err := kubectl(t, e, "top", "nodes")
	if err != nil || !strings.Contains(out, "demo-cpu-") {
		t.Errorf("kubectl top nodes: %v\n%s", err, out)
	}

	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "sim"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "sim"},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    6,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)}},
			}},
		},
	}
	if _, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	testenv.Eventually(t, 3*time.Minute, "HPA scales sim to 4 ready replicas", func() error {
		h, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "sim", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "sim", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h.Status.DesiredReplicas != 4 || d.Status.ReadyReplicas != 4 {
			var conds []string
			for _, c := range h.Status.Conditions {
				conds = append(conds, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Message))
			}
			return fmt.Errorf("HPA desired %d, deployment ready %d; %s", h.Status.DesiredReplicas, d.Status.ReadyReplicas, strings.Join(conds, "; "))
		}
		return nil
	})
	t.Logf("FIGURE HPA created -> 4 ready replicas on kwok nodes: %s (HPA sync period 15s)", time.Since(start).Round(10*time.Millisecond))
}

// kubectl runs the built kubectl against the cluster demo.
func kubectl(t *testing.T, e *testenv.Env, args ...string) (string, error) {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "demo.kubeconfig")
	if err := os.WriteFile(kc, []byte(e.MustRun("kubeconfig", "demo")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), filepath.Join(e.BinDir, "kubectl"), append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
	return string(out), err
}
