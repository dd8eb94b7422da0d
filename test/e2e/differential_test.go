package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/internal/autoscaler/decide"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/test/testenv"
)

// TestSimulationAgreesWithKubeScheduler places pods one at a time with the
// real kube-scheduler and checks that the autoscaler's simulation agrees:
// a pod the scheduler bound fits the node it chose, and a pod it left
// unschedulable fits no node.
func TestSimulationAgreesWithKubeScheduler(t *testing.T) {
	e := testenv.Up(t)
	ctx := context.Background()
	e.MustRun("cluster", "create", "demo", "--wait")
	e.MustRun("nodepool", "create", "demo/gpu", "--instance-type", "gpu-h100x8", "--replicas", "2", "--wait")
	e.MustRun("nodepool", "create", "demo/ssd", "--instance-type", "cpu-small", "--replicas", "2",
		"--label", "disk=ssd", "--taint", "dedicated=ssd:NoSchedule", "--wait")
	e.MustRun("nodepool", "create", "demo/std", "--instance-type", "cpu-medium", "--replicas", "2",
		"--label", "topology.kubernetes.io/zone=local-b", "--wait")
	cs := e.Tenant("demo")
	testenv.Eventually(t, 60*time.Second, "nodes schedulable", func() error {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range nodes.Items {
			for _, tn := range n.Spec.Taints {
				if tn.Key == corev1.TaintNodeNotReady {
					return fmt.Errorf("%s still not-ready", n.Name)
				}
			}
		}
		if len(nodes.Items) != 6 {
			return fmt.Errorf("%d nodes", len(nodes.Items))
		}
		return nil
	})

	cpu := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
	}
	gpu := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(n, resource.DecimalSI)}
	}
	ssdToleration := []corev1.Toleration{{Key: "dedicated", Value: "ssd", Operator: corev1.TolerationOpEqual, Effect: corev1.TaintEffectNoSchedule}}
	gpuToleration := []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
	soloAnti := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "solo"}}, TopologyKey: corev1.LabelHostname,
	}}}}
	zoneIn := func(op corev1.NodeSelectorOperator, zones ...string) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelTopologyZone, Operator: op, Values: zones,
			}}}},
		}}}
	}
	spread := []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}},
	}}
	type podSpec struct {
		name         string
		labels       map[string]string
		requests     corev1.ResourceList
		limits       corev1.ResourceList
		nodeSelector map[string]string
		tolerations  []corev1.Toleration
		affinity     *corev1.Affinity
		spread       []corev1.TopologySpreadConstraint
	}
	pods := []podSpec{
		{name: "plain", requests: cpu("500m")},
		{name: "ssd-untolerated", requests: cpu("100m"), nodeSelector: map[string]string{"disk": "ssd"}},
		{name: "ssd-tolerated", requests: cpu("100m"), nodeSelector: map[string]string{"disk": "ssd"}, tolerations: ssdToleration},
		{name: "gpu-4", limits: gpu(4)},
		{name: "gpu-8", limits: gpu(8)},
		{name: "gpu-5", limits: gpu(5)},
		{name: "huge-cpu", requests: cpu("1000")},
		{name: "solo-1", labels: map[string]string{"app": "solo"}, requests: cpu("100m"), affinity: soloAnti},
		{name: "solo-2", labels: map[string]string{"app": "solo"}, requests: cpu("100m"), affinity: soloAnti},
		{name: "solo-3", labels: map[string]string{"app": "solo"}, requests: cpu("100m"), affinity: soloAnti},
		{name: "zone-b", requests: cpu("100m"), affinity: zoneIn(corev1.NodeSelectorOpIn, "local-b")},
		{name: "zone-none", requests: cpu("100m"), affinity: zoneIn(corev1.NodeSelectorOpNotIn, "local-a", "local-b")},
		{name: "spread-1", labels: map[string]string{"app": "spread"}, requests: cpu("100m"), nodeSelector: map[string]string{"fke.dev/nodepool": "std"}, spread: spread},
		{name: "spread-2", labels: map[string]string{"app": "spread"}, requests: cpu("100m"), nodeSelector: map[string]string{"fke.dev/nodepool": "std"}, spread: spread},
		{name: "spread-3", labels: map[string]string{"app": "spread"}, requests: cpu("100m"), nodeSelector: map[string]string{"fke.dev/nodepool": "std"}, spread: spread},
		{name: "cpu-on-gpu-node", requests: cpu("1"), nodeSelector: map[string]string{"fke.dev/nodepool": "gpu"}, tolerations: gpuToleration},
		{name: "cpu-on-gpu-untolerated", requests: cpu("1"), nodeSelector: map[string]string{"fke.dev/nodepool": "gpu"}},
	}
	bound, unschedulable := 0, 0
	for _, ps := range pods {
		snap := snapshotOf(t, cs)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: ps.name, Labels: ps.labels},
			Spec: corev1.PodSpec{
				NodeSelector: ps.nodeSelector, Tolerations: ps.tolerations, Affinity: ps.affinity, TopologySpreadConstraints: ps.spread,
				Containers: []corev1.Container{{Name: "main", Image: "registry.local/app:1",
					Resources: corev1.ResourceRequirements{Requests: ps.requests, Limits: ps.limits}}},
			},
		}
		created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating %s: %v", ps.name, err)
		}
		node, scheduled := waitPlaced(t, cs, ps.name)
		fits, reason := decide.CheckCapacity(snap, []*corev1.Pod{created})
		switch {
		case scheduled && !fits:
			t.Errorf("%s: kube-scheduler bound it to %s, the simulation says it fits nowhere (%s)", ps.name, node, reason)
		case !scheduled && fits:
			t.Errorf("%s: kube-scheduler left it unschedulable, the simulation says it fits", ps.name)
		case scheduled:
			bound++
			for _, ni := range snap.Nodes {
				if ni.Node.Name == node {
					if ok, why := decide.Fits(created, ni.Node, ni.Pods); !ok {
						t.Errorf("%s: bound to %s, but Fits says no: %s", ps.name, node, why)
					}
				}
			}
		default:
			unschedulable++
		}
	}
	if bound == 0 || unschedulable == 0 {
		t.Fatalf("the cases must cover both outcomes: %d bound, %d unschedulable", bound, unschedulable)
	}
	t.Logf("%d pods bound and %d unschedulable, simulation agreed on all", bound, unschedulable)
}

// snapshotOf reads nodes and bound pods as the autoscaler would.
func snapshotOf(t *testing.T, cs kubernetes.Interface) decide.Snapshot {
	t.Helper()
	ctx := context.Background()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string][]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName != "" {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	var s decide.Snapshot
	for i := range nodes.Items {
		n := &nodes.Items[i]
		s.Nodes = append(s.Nodes, decide.NodeInfo{Node: n, Pool: n.Labels["fke.dev/nodepool"], Ready: nodeutil.NodeReady(n), Pods: byNode[n.Name]})
	}
	return s
}

// waitPlaced waits until kube-scheduler bound the pod or declared it unschedulable.
func waitPlaced(t *testing.T, cs kubernetes.Interface, name string) (node string, scheduled bool) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "pod "+name+" placed", func() error {
		p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			node, scheduled = p.Spec.NodeName, true
			return nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return nil
			}
		}
		return fmt.Errorf("not placed yet")
	})
	return node, scheduled
}
