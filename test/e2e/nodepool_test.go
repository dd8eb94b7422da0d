package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/test/testenv"
)

// TestNodePools drives node pools on kwok nodes through the CLI and checks
// what a user sees with kubectl in the tenant cluster.
func TestNodePools(t *testing.T) {
	e := testenv.Up(t)
	ctx := context.Background()

	// Bad input is rejected before anything is created.
	e.MustRun("cluster", "create", "demo", "--wait")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nodepool", "create", "demo/gpu", "--instance-type", "gpu-x9000", "--replicas", "1"}, `instance type "gpu-x9000" not found`},
		{[]string{"nodepool", "create", "demo/gpu", "--instance-type", "gpu-h100x8", "--replicas", "-1"}, "--replicas must not be negative"},
		{[]string{"nodepool", "create", "demo/gpu", "--instance-type", "gpu-h100x8", "--min", "3", "--max", "1"}, "--min 3 is greater than --max 1"},
		{[]string{"nodepool", "create", "nope/gpu", "--instance-type", "gpu-h100x8"}, `cluster "nope" not found`},
		{[]string{"nodepool", "create", "gpu", "--instance-type", "gpu-h100x8"}, "must be written CLUSTER/NAME"},
		{[]string{"cluster", "create", "other", "--nodepool", "name=gpu,type=nope"}, `instance type "nope" not found`},
		{[]string{"cluster", "create", "other", "--nodepool", "name=gpu,type=cpu-small", "--nodepool", "name=gpu,type=cpu-small"}, `pool "gpu" is given twice`},
		// The second pool is refused by the API (its provider is outside the
		// schema's enum): nothing of the cluster is kept.
		{[]string{"cluster", "create", "other", "--nodepool", "name=a,type=cpu-small,replicas=0", "--nodepool", "name=b,type=cpu-small,provider=nowhere"}, "nothing was kept: cluster other"},
	} {
		if out := e.RunFail(tc.args...); !strings.Contains(out, tc.want) {
			t.Errorf("fke %s: want %q in:\n%s", strings.Join(tc.args, " "), tc.want, out)
		}
	}
	testenv.Eventually(t, 60*time.Second, "the refused cluster removed", func() error {
		var pools fkev1.NodePoolList
		if err := e.Client().List(ctx, &pools); err != nil || len(pools.Items) != 0 {
			return fmt.Errorf("rejected commands left %d pools (%v)", len(pools.Items), err)
		}
		var clusters fkev1.ClusterList
		if err := e.Client().List(ctx, &clusters); err != nil {
			return err
		}
		if len(clusters.Items) != 1 {
			return fmt.Errorf("rejected cluster create left %d clusters", len(clusters.Items))
		}
		return nil
	})

	// The default catalog is installed and listed as a table.
	types := e.MustRun("instancetypes")
	for _, want := range []string{"NAME", "PRICE/H", "cpu-small", "gpu-l4x1", "gpu-a100x8", "gpu-h200x8", "gpu-b200x8", "NVIDIA-H100-80GB-HBM3"} {
		if !strings.Contains(types, want) {
			t.Errorf("fke instancetypes lacks %q:\n%s", want, types)
		}
	}

	e.MustRun("nodepool", "create", "demo/gpu", "--instance-type", "gpu-h100x8", "--replicas", "2", "--wait")
	e.MustRun("nodepool", "create", "demo/cpu", "--instance-type", "cpu-medium", "--replicas", "1", "--wait")
	cs := e.Tenant("demo")

	// Pool names are per cluster: another cluster has its own pool gpu,
	// addressed as CLUSTER/NAME by every command.
	e.MustRun("cluster", "create", "second", "--wait", "--nodepool", "name=gpu,type=cpu-small,replicas=0")
	e.MustRun("nodepool", "scale", "second/gpu", "--replicas", "1", "--wait")
	if out := e.MustRun("nodepool", "get", "second/gpu"); !strings.Contains(out, "cpu-small") || strings.Contains(out, "gpu-h100x8") {
		t.Errorf("fke nodepool get second/gpu shows another pool:\n%s", out)
	}
	if out := e.MustRun("nodepool", "get", "demo/gpu"); !strings.Contains(out, "gpu-h100x8") {
		t.Errorf("fke nodepool get demo/gpu:\n%s", out)
	}
	list := e.MustRun("nodepool", "list")
	if strings.Count(list, "gpu ") < 2 || !strings.Contains(list, "second") {
		t.Errorf("fke nodepool list does not show both gpu pools:\n%s", list)
	}
	if n := len(poolNodes(t, e.Tenant("second"), "gpu")); n != 1 {
		t.Errorf("cluster second has %d nodes in its pool gpu, want 1", n)
	}
	if n := len(poolNodes(t, cs, "gpu")); n != 2 {
		t.Errorf("scaling second/gpu changed demo/gpu: %d nodes, want 2", n)
	}
	e.MustRun("nodepool", "delete", "second/gpu", "--wait")
	if n := len(poolNodes(t, cs, "gpu")); n != 2 {
		t.Errorf("deleting second/gpu changed demo/gpu: %d nodes, want 2", n)
	}
	e.MustRun("cluster", "delete", "second", "--wait")

	gpuNodes := poolNodes(t, cs, "gpu")
	if len(gpuNodes) != 2 {
		t.Fatalf("want 2 GPU nodes, got %d", len(gpuNodes))
	}
	for _, n := range gpuNodes {
		if !nodeutil.NodeReady(&n) {
			t.Errorf("node %s not Ready", n.Name)
		}
		if got := n.Status.Allocatable["nvidia.com/gpu"]; got.Value() != 8 {
			t.Errorf("node %s allocatable nvidia.com/gpu = %s, want 8", n.Name, got.String())
		}
		for k, v := range map[string]string{
			"nvidia.com/gpu.product":           "NVIDIA-H100-80GB-HBM3",
			"nvidia.com/gpu.count":             "8",
			"nvidia.com/gpu.memory":            "81559",
			"nvidia.com/gpu.family":            "hopper",
			"nvidia.com/gpu.compute.major":     "9",
			"node.kubernetes.io/instance-type": "gpu-h100x8",
			"fke.dev/nodepool":                 "gpu",
		} {
			if n.Labels[k] != v {
				t.Errorf("node %s label %s = %q, want %q", n.Name, k, n.Labels[k], v)
			}
		}
		if !hasGPUTaint(&n) {
			t.Errorf("GPU node %s lacks the nvidia.com/gpu=present:NoSchedule taint", n.Name)
		}
	}

	// A pod asking for 4 GPUs is scheduled by kube-scheduler and Running
	// (the GPU toleration comes from the ExtendedResourceToleration plugin).
	createPod(t, cs, "train", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")})
	trainNode := waitRunning(t, cs, "train")
	if !strings.HasPrefix(trainNode, "demo-gpu-") {
		t.Fatalf("4-GPU pod ran on %s, want a gpu node", trainNode)
	}
	// 9 GPUs fit no node.
	createPod(t, cs, "too-big", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("9")})
	testenv.Eventually(t, 30*time.Second, "9-GPU pod unschedulable", func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "too-big", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "Insufficient nvidia.com/gpu") {
				return nil
			}
		}
		return fmt.Errorf("phase %s, conditions %+v", p.Status.Phase, p.Status.Conditions)
	})
	// A CPU-only pod lands on the CPU node, never on a GPU node.
	createPod(t, cs, "web", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")})
	if node := waitRunning(t, cs, "web"); !strings.HasPrefix(node, "demo-cpu-") {
		t.Fatalf("CPU-only pod ran on %s, want the cpu pool", node)
	}

	// The pool reports GPU capacity and allocation.
	testenv.Eventually(t, 30*time.Second, "pool GPU status", func() error {
		np := &fkev1.NodePool{}
		if err := e.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo.gpu"}, np); err != nil {
			return err
		}
		if np.Status.GPUCapacity != 16 || np.Status.GPUAllocated != 4 || np.Status.ReadyReplicas != 2 {
			return fmt.Errorf("status %+v", np.Status)
		}
		return nil
	})
	if out := e.MustRun("cluster", "get", "demo"); !strings.Contains(out, "GPUs: 24") && !strings.Contains(out, "16 allocatable, 4 allocated") {
		t.Errorf("cluster get does not show GPU allocation:\n%s", out)
	}

	// 2 → 3 adds one node; 3 → 1 keeps the node running the GPU pod.
	before := names(gpuNodes)
	e.MustRun("nodepool", "scale", "demo/gpu", "--replicas", "3", "--wait")
	after := names(poolNodes(t, cs, "gpu"))
	if len(after) != 3 || !containsAll(after, before) {
		t.Fatalf("scale 2→3: nodes %v → %v, want the old two plus one", before, after)
	}
	e.MustRun("nodepool", "scale", "demo/gpu", "--replicas", "1", "--wait")
	testenv.Eventually(t, 60*time.Second, "pool at one node", func() error {
		left := names(poolNodes(t, cs, "gpu"))
		if len(left) != 1 {
			return fmt.Errorf("nodes %v", left)
		}
		if left[0] != trainNode {
			return fmt.Errorf("kept %s, want %s (the node running the GPU pod)", left[0], trainNode)
		}
		return nil
	})
	if node := waitRunning(t, cs, "train"); node != trainNode {
		t.Fatalf("GPU pod moved to %s", node)
	}

	// Changing the pool's labels replaces its node as a rolling update
	// (maxSurge 1, maxUnavailable 0: never fewer than one ready CPU node).
	oldCPU := names(poolNodes(t, cs, "cpu"))
	cpuPool := &fkev1.NodePool{}
	if err := e.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo.cpu"}, cpuPool); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cpuPool.DeepCopy())
	cpuPool.Spec.Labels = map[string]string{"tier": "frontend"}
	if err := e.Client().Patch(ctx, cpuPool, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "cpu node replaced", func() error {
		nodes := poolNodes(t, cs, "cpu")
		ready := 0
		for i := range nodes {
			if nodeutil.NodeReady(&nodes[i]) {
				ready++
			}
		}
		if ready == 0 {
			t.Errorf("no ready CPU node during the rolling update (maxUnavailable 0)")
		}
		if len(nodes) > 2 {
			t.Errorf("%d CPU nodes during the rolling update, maxSurge allows 2", len(nodes))
		}
		if len(nodes) != 1 || nodes[0].Name == oldCPU[0] || nodes[0].Labels["tier"] != "frontend" {
			return fmt.Errorf("nodes %v", names(nodes))
		}
		return nil
	})

	// Deleting the pool removes its nodes and Machines.
	e.MustRun("nodepool", "delete", "demo/gpu", "--wait")
	testenv.Eventually(t, 60*time.Second, "GPU nodes gone", func() error {
		if left := poolNodes(t, cs, "gpu"); len(left) != 0 {
			return fmt.Errorf("nodes left: %v", names(left))
		}
		var ms fkev1.MachineList
		if err := e.Client().List(ctx, &ms, client.MatchingLabels{fkev1.LabelNodePool: "gpu"}); err != nil {
			return err
		}
		if len(ms.Items) != 0 {
			return fmt.Errorf("%d machines left", len(ms.Items))
		}
		return nil
	})
	if out := e.MustRun("nodepool", "list", "demo"); strings.Contains(out, "gpu-h100x8") {
		t.Errorf("deleted pool still listed:\n%s", out)
	}
}

func poolNodes(t *testing.T, cs kubernetes.Interface, pool string) []corev1.Node {
	t.Helper()
	list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "fke.dev/nodepool=" + pool})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func hasGPUTaint(n *corev1.Node) bool {
	for _, tn := range n.Spec.Taints {
		if tn.Key == "nvidia.com/gpu" && tn.Value == "present" && tn.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

func createPod(t *testing.T, cs kubernetes.Interface, name string, req corev1.ResourceList) {
	t.Helper()
	limits := corev1.ResourceList{}
	for k, v := range req {
		if strings.Contains(string(k), "/") {
			limits[k] = v
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: "registry.local/app:1",
			Resources: corev1.ResourceRequirements{Requests: req, Limits: limits},
		}}},
	}
	testenv.Eventually(t, 30*time.Second, "creating pod "+name, func() error {
		// The default ServiceAccount appears once kube-controller-manager has run.
		_, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{})
		return err
	})
}

func waitRunning(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	var node string
	testenv.Eventually(t, 60*time.Second, "pod "+name+" Running", func() error {
		p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s on %q", p.Status.Phase, p.Spec.NodeName)
		}
		node = p.Spec.NodeName
		return nil
	})
	return node
}

func names(nodes []corev1.Node) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out
}

func containsAll(have, want []string) bool {
	set := map[string]bool{}
	for _, h := range have {
		set[h] = true
	}
	for _, w := range want {
		if !set[w] {
			return false
		}
	}
	return true
}
