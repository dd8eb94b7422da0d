package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"fke.dev/fke/internal/nodeprovider/kwok"
	"fke.dev/fke/test/testenv"
)

// TestNodeMetricsOfIdleKwokNodes: a kwok node with no pods reports its idle
// usage as a kubelet does, so `kubectl top nodes` shows it from the start
// (metrics-server drops a node whose usage is zero); a pod on it adds its
// own usage.
func TestNodeMetricsOfIdleKwokNodes(t *testing.T) {
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
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 1 {
		t.Fatalf("%d nodes, want 1", len(nodes.Items))
	}
	node := nodes.Items[0]
	wantCPU, wantMemory := kwok.IdleUsage(node.Status.Capacity)
	if node.Annotations[kwok.AnnotationIdleUsageCPU] != wantCPU.String() || node.Annotations[kwok.AnnotationIdleUsageMemory] != wantMemory.String() {
		t.Fatalf("node %s idle usage annotations %v, want %s and %s", node.Name, node.Annotations, wantCPU.String(), wantMemory.String())
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil || len(pods.Items) != 0 {
		t.Fatalf("pods on node %s: %d, %v; want none", node.Name, len(pods.Items), err)
	}

	// usage waits for the node's metrics to say cpu (about) and memory (exactly).
	usage := func(what string, cpu, memory resource.Quantity) {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, what, func() error {
			m, err := metrics.MetricsV1beta1().NodeMetricses().Get(ctx, node.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			// The rate of simulated CPU time may be off by a scrape's jitter.
			got, want := m.Usage.Cpu().MilliValue(), cpu.MilliValue()
			if got < want*9/10 || got > want*11/10+1 {
				return fmt.Errorf("cpu %dm, want about %dm", got, want)
			}
			if got := m.Usage.Memory(); got.Cmp(memory) != 0 {
				return fmt.Errorf("memory %s, want %s", got.String(), memory.String())
			}
			return nil
		})
	}
	start := time.Now()
	usage("idle node metrics of "+node.Name, wantCPU, wantMemory)
	t.Logf("FIGURE kwok node without pods -> its metrics served: %s (node %s old)", time.Since(start).Round(10*time.Millisecond),
		time.Since(node.CreationTimestamp.Time).Round(time.Second))
	out, err := kubectl(t, e, "top", "nodes")
	if err != nil || !strings.Contains(out, node.Name) {
		t.Errorf("kubectl top nodes: %v\n%s", err, out)
	}

	// A pod adds what it uses.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sim", Annotations: map[string]string{
			kwok.AnnotationUsageCPU: "200m", kwok.AnnotationUsageMemory: "48Mi",
		}},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "app", Image: "simulated"}}},
	}
	testenv.Eventually(t, 30*time.Second, "pod sim created (the default service account exists)", func() error {
		_, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	busyCPU, busyMemory := wantCPU.DeepCopy(), wantMemory.DeepCopy()
	busyCPU.Add(resource.MustParse("200m"))
	busyMemory.Add(resource.MustParse("48Mi"))
	usage("node metrics of "+node.Name+" with pod sim", busyCPU, busyMemory)
}
