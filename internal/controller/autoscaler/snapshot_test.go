package autoscaler

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/autoscaler/decide"
	"fke.dev/fke/internal/catalog"
	"fke.dev/fke/internal/nodetemplate"
	"fke.dev/fke/internal/tenant"
)

func gpuPool(replicas int32) *fkev1.NodePool {
	return &fkev1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo.gpu"},
		Spec: fkev1.NodePoolSpec{ClusterName: "demo", PoolName: "gpu", InstanceType: "gpu-h100x8", Replicas: ptr.To(replicas),
			Autoscaling: &fkev1.NodePoolAutoscaling{MinSize: 0, MaxSize: 4}},
	}
}

func types_() map[string]*fkev1.InstanceType {
	out := map[string]*fkev1.InstanceType{}
	for _, it := range catalog.Default() {
		out[it.Name] = &it
	}
	return out
}

// machine returns a Machine of pool gpu and, when registered, its Node.
func machine(name string, ready, registered bool) (*fkev1.Machine, *corev1.Node) {
	m := &fkev1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.Now()},
		Spec:       fkev1.MachineSpec{ClusterName: "demo", NodePoolName: "gpu", InstanceType: "gpu-h100x8"},
	}
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	m.Status.Conditions = []metav1.Condition{{Type: fkev1.ConditionReady, Status: status}}
	if !registered {
		return m, nil
	}
	m.Status.NodeName = name
	it := types_()["gpu-h100x8"]
	n := nodetemplate.Build(gpuPool(0), it, name)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if !ready {
		delete(n.Status.Allocatable, nodetemplate.ResourceGPU) // device plugin not registered yet
	}
	// kube-controller-manager removes this taint a moment after the node turns Ready.
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})
	return m, n
}

func pendingGPUPod(i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("trainer-%d", i), UID: types.UID(fmt.Sprint(i)),
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "trainer", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}},
			Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}},
	}
}

// TestNoDuplicateScaleUp: machines that are coming up (not registered, or
// Ready without allocatable GPUs) and replicas not yet turned into machines
// count as capacity, so the same pending pods never grow the pool twice.
func TestNoDuplicateScaleUp(t *testing.T) {
	type mspec struct{ ready, registered bool }
	tests := []struct {
		name     string
		replicas int32
		machines []mspec
		pending  int
		want     int // nodes to add
	}{
		{"from zero", 0, nil, 3, 3},
		{"replicas raised, no machines yet", 3, nil, 3, 0},
		{"machines created, not registered", 3, []mspec{{false, false}, {false, false}, {false, false}}, 3, 0},
		{"one ready, two coming", 3, []mspec{{true, true}, {false, true}, {false, false}}, 3, 0},
		{"ready without GPUs yet", 3, []mspec{{false, true}, {false, true}, {false, true}}, 3, 0},
		{"one more pod than capacity", 3, []mspec{{true, true}, {false, true}, {false, false}}, 4, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var machines []*fkev1.Machine
			var nodes []*corev1.Node
			for i, ms := range tt.machines {
				m, n := machine(fmt.Sprintf("gpu-%d", i), ms.ready, ms.registered)
				machines = append(machines, m)
				if n != nil {
					nodes = append(nodes, n)
				}
			}
			var pods []*corev1.Pod
			for i := 0; i < tt.pending; i++ {
				pods = append(pods, pendingGPUPod(i))
			}
			pools, _ := decide.BuildPools([]*fkev1.NodePool{gpuPool(tt.replicas)}, types_(), machines, nil, nil)
			snap := decide.BuildSnapshot(nodes, decide.GroupPods(pods), machines, decide.Limits{})
			plan := decide.ScaleUp(snap, pools, decide.Expander{}, time.Now())
			got := 0
			for _, inc := range plan.Increases {
				got += inc.Delta
			}
			if got != tt.want {
				t.Fatalf("scale-up adds %d nodes, want %d (pools %+v, plan %+v)", got, tt.want, pools[0], plan)
			}
		})
	}
}

// BenchmarkBuildSnapshot is the per-pass cost of the snapshot of 30,000
// pods on 1,000 nodes with their machines (the fleet benchmark's shape):
// the pods grouped by node as the tenant's pod index keeps them, with 20
// pods changed since the last pass.
func BenchmarkBuildSnapshot(b *testing.B) {
	var nodes []*corev1.Node
	var machines []*fkev1.Machine
	var pods []*corev1.Pod
	index := tenant.NewPodIndex()
	for i := 0; i < 1000; i++ {
		m, n := machine(fmt.Sprintf("m-%d", i), true, true)
		nodes, machines = append(nodes, n), append(machines, m)
		for j := 0; j < 30; j++ {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("p-%d-%d", i, j), UID: types.UID(fmt.Sprintf("u-%d-%d", i, j))},
				Spec:       corev1.PodSpec{NodeName: n.Name},
			}
			pods = append(pods, p)
			index.Set(p)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := 0; k < 20; k++ {
			index.Set(pods[(i*20+k)*97%len(pods)])
		}
		var g decide.PodGroups
		g.ByNode, g.Unbound = index.Grouped()
		decide.BuildSnapshot(nodes, g, machines, decide.Limits{})
	}
}

func TestClusterStatePrune(t *testing.T) {
	st := &clusterState{podReasons: map[types.UID]string{}, measured: map[types.UID]bool{}}
	live := map[types.UID]bool{}
	for i := 0; i < 10; i++ {
		uid := types.UID(fmt.Sprintf("live-%d", i))
		live[uid] = true
		st.podReasons[uid], st.measured[uid] = "r", true
	}
	has := func(uid types.UID) bool { return live[uid] }
	for i := 0; i < 600; i++ {
		uid := types.UID(fmt.Sprintf("gone-%d", i))
		st.podReasons[uid], st.measured[uid] = "r", true
	}
	st.prune(len(live), has)
	if len(st.podReasons) != 10 || len(st.measured) != 10 {
		t.Fatalf("after prune: %d reasons, %d measured; want 10 each", len(st.podReasons), len(st.measured))
	}
	st.podReasons["gone-x"] = "r"
	st.prune(len(live), has) // below the threshold: nothing to do yet
	if len(st.podReasons) != 11 {
		t.Fatalf("pruned below the threshold: %d", len(st.podReasons))
	}
}

func TestWithPlacements(t *testing.T) {
	m, n := machine("m-1", true, true)
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "p"}}
	s := decide.BuildSnapshot([]*corev1.Node{n}, decide.PodGroups{}, []*fkev1.Machine{m}, decide.Limits{})
	got := decide.WithPlacements(s, []decide.PodPlacement{{Pod: pending, Node: n.Name}, {Pod: pending, Node: "upcoming-gpu-0", Upcoming: true}})
	if len(got.Nodes[0].Pods) != 1 || got.Nodes[0].Pods[0] != pending {
		t.Fatalf("pods on %s: %v, want the pending pod", n.Name, got.Nodes[0].Pods)
	}
	if len(s.Nodes[0].Pods) != 0 {
		t.Fatal("the original snapshot was modified")
	}
}

// TestStartingNodes: a pending pod placed on a Ready node that still has
// the not-ready taint waits for that node to come up; one placed on an
// untainted node or an upcoming machine does not make the node starting.
func TestStartingNodes(t *testing.T) {
	node := func(name string, taints ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, k := range taints {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoSchedule})
		}
		return n
	}
	nodes := []*corev1.Node{
		node("fresh", corev1.TaintNodeNotReady),
		node("lost", corev1.TaintNodeUnreachable),
		node("open"),
		node("gpu-only", "nvidia.com/gpu"),
		node("fresh-unused", corev1.TaintNodeNotReady),
	}
	tests := []struct {
		name       string
		placements []decide.PodPlacement
		want       []string
	}{
		{"nothing placed", nil, nil},
		{"placed on a node still tainted not-ready", []decide.PodPlacement{{Node: "fresh", Pool: "gpu"}}, []string{"fresh"}},
		{"placed on a node tainted unreachable", []decide.PodPlacement{{Node: "lost", Pool: "gpu"}}, []string{"lost"}},
		{"placed on usable nodes", []decide.PodPlacement{{Node: "open"}, {Node: "gpu-only"}}, nil},
		{"placed on an upcoming machine", []decide.PodPlacement{{Node: "upcoming-gpu-0", Pool: "gpu", Upcoming: true}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decide.StartingNodes(nodes, tt.placements)
			if len(got) != len(tt.want) {
				t.Fatalf("starting %v, want %v", got, tt.want)
			}
			for _, n := range tt.want {
				if !got[n] {
					t.Fatalf("starting %v, want %v", got, tt.want)
				}
			}
		})
	}
}
