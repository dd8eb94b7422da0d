package decide

import (
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// planSummary renders what a user sees of a scale-up plan.
func planSummary(p ScaleUpPlan) string {
	var fit []string
	for _, s := range p.Schedulable {
		fit = append(fit, s.Pod.Name+"@"+s.Node)
	}
	sort.Strings(fit)
	r := reasonsOf(p)
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var rs []string
	for _, k := range keys {
		rs = append(rs, k+": "+r[k])
	}
	return fmt.Sprintf("increases %s; fit %v; reasons %v", increases(p), fit, rs)
}

func downSummary(p ScaleDownPlan) string {
	var rm []string
	for _, r := range p.Remove {
		rm = append(rm, r.Node+" ("+r.Reason+")")
	}
	return fmt.Sprintf("remove %v; kept %v", rm, p.Kept)
}

// TestMemoNeverChangesResult runs the same decisions with and without a
// memo, pass after pass, while bound pods change (a new resourceVersion),
// appear and go away, and nodes change: the plans must be equal every time.
// As tenant.PodIndex does, a node whose pods change gets a new slice.
func TestMemoNeverChangesResult(t *testing.T) {
	t.Parallel()
	node := func(name string, gpus int64, rv string) *corev1.Node {
		n := mkNode(name, 4, 64, gpus, nodeTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule), nodeLabels(corev1.LabelTopologyZone, "z1"))
		n.ResourceVersion = rv
		return n
	}
	bound := func(name string, gpus int64, opts ...podOpt) *corev1.Pod {
		p := mkPod(name, 1000, 1024, gpus, append(opts, tolerateGPU())...)
		p.ResourceVersion = "1"
		return p
	}
	n1 := []*corev1.Pod{bound("a", 4), bound("b", 2), bound("anti", 1, podAntiAffinity(corev1.LabelHostname, "app", "solo"))}
	n2 := []*corev1.Pod{bound("c", 0), bound("d", 1)}
	s := Snapshot{
		Nodes: []NodeInfo{
			{Node: node("n1", 8, "1"), Pool: "gpu", Ready: true, Pods: n1},
			{Node: node("n2", 8, "1"), Pool: "gpu", Ready: true, Pods: n2},
		},
		Pending: append(mkPods("p", 3, 1000, 1024, 2, tolerateGPU()), mkPod("solo", 1000, 1024, 1, tolerateGPU(), podLabels("app", "solo")), mkPod("hp", 100, 128, 0, tolerateGPU(), hostPortOpt(8080))),
	}
	pools := []Pool{gpuPool("gpu", 8, 2, 10)}
	pools[0].ScaleDownUnneededTime = time.Minute

	// replace gives node i a new pod slice with pod j replaced by p.
	replace := func(i, j int, p *corev1.Pod) {
		pods := append([]*corev1.Pod(nil), s.Nodes[i].Pods...)
		pods[j] = p
		s.Nodes[i].Pods = pods
	}
	memo := NewMemo()
	steps := []struct {
		name   string
		change func()
	}{
		{"first pass", func() {}},
		{"unchanged", func() {}},
		{"a shrinks to 100m and no GPU (new resourceVersion)", func() {
			a := n1[0].DeepCopy()
			a.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
			a.ResourceVersion = "2"
			replace(0, 0, a)
		}},
		{"d finishes", func() {
			d := n2[1].DeepCopy()
			d.Status.Phase = corev1.PodSucceeded
			d.ResourceVersion = "2"
			replace(1, 1, d)
		}},
		{"a new pod with host port on n2", func() {
			p := bound("e", 1, hostPortOpt(8080))
			p.UID = types.UID("uid-e")
			s.Nodes[1].Pods = append(s.Nodes[1].Pods[:len(s.Nodes[1].Pods):len(s.Nodes[1].Pods)], p)
		}},
		{"c on n2 is replaced by a pod with zone anti-affinity to solo", func() {
			p := bound("c2", 0, podAntiAffinity(corev1.LabelTopologyZone, "app", "solo"))
			p.UID = types.UID("uid-c2")
			p.OwnerReferences[0].UID = "rs-c2-uid" // its own controller: a spec of its own
			replace(1, 0, p)
		}},
		{"n2 loses its GPUs (new resourceVersion)", func() { s.Nodes[1].Node = node("n2", 0, "2") }},
		{"n1 emptied", func() { s.Nodes[0].Pods = nil }},
	}
	for _, st := range steps {
		st.change()
		plain, memoized := s, s
		memoized.Memo = memo
		if a, b := planSummary(ScaleUp(plain, pools, Expander{}, t0)), planSummary(ScaleUp(memoized, pools, Expander{}, t0)); a != b {
			t.Fatalf("%s: scale-up without memo:\n%s\nwith memo:\n%s", st.name, a, b)
		}
		since := map[string]time.Time{"n1": t0.Add(-time.Hour), "n2": t0.Add(-time.Hour)}
		plainDown, memoDown := s, s
		plainDown.Pending, memoDown.Pending = nil, nil
		memoDown.Memo = memo
		if a, b := downSummary(ScaleDown(plainDown, pools, since, t0)), downSummary(ScaleDown(memoDown, pools, since, t0)); a != b {
			t.Fatalf("%s: scale-down without memo:\n%s\nwith memo:\n%s", st.name, a, b)
		}
		t.Logf("%s: %s", st.name, planSummary(ScaleUp(memoized, pools, Expander{}, t0)))
	}
}

// TestMemoDropsGonePods checks the memo forgets pods that are no longer
// bound, so it does not grow with the cluster's history.
func TestMemoDropsGonePods(t *testing.T) {
	t.Parallel()
	memo := NewMemo()
	pods := mkPods("p", 50, 100, 128, 0)
	for _, p := range pods {
		p.ResourceVersion = "1"
	}
	s := Snapshot{Nodes: []NodeInfo{{Node: mkNode("n", 64, 256, 0), Pool: "cpu", Ready: true, Pods: pods}}, Memo: memo}
	pools := []Pool{cpuPool("cpu", 1, 3)}
	ScaleDown(s, pools, nil, t0)
	if memo.Len() != 50 {
		t.Fatalf("memo holds %d pods, want 50", memo.Len())
	}
	s.Nodes[0].Pods = pods[:10]
	for i := 0; i < 2*memoKeep; i++ {
		ScaleDown(s, pools, nil, t0)
	}
	if memo.Len() != 10 {
		t.Fatalf("memo holds %d pods after the others went, want 10", memo.Len())
	}
	// Pods without a resourceVersion cannot be checked for changes: never kept.
	fresh := mkPods("q", 5, 100, 128, 0)
	s.Nodes[0].Pods = fresh
	ScaleDown(s, pools, nil, t0)
	if memo.Len() != 10 {
		t.Fatalf("memo holds %d pods, want 10 (pods without resourceVersion are not kept)", memo.Len())
	}
	if !reflect.DeepEqual(memo.get(fresh[0]).req, parsePod(fresh[0]).req) {
		t.Fatal("uncached parse differs")
	}
}

// TestMemoNodeSeesNewPodSlice checks a node's memo entry follows its pod
// slice: a new slice with a pod that has required anti-affinity is seen,
// though the node and the slice's length are unchanged.
func TestMemoNodeSeesNewPodSlice(t *testing.T) {
	t.Parallel()
	memo := NewMemo()
	n := mkNode("n1", 4, 64, 8)
	n.ResourceVersion = "1"
	plain := []*corev1.Pod{mkPod("a", 100, 128, 0), mkPod("b", 100, 128, 0)}
	if _, anti := memo.node(&NodeInfo{Node: n, Pods: plain}); anti {
		t.Fatal("no pod has anti-affinity, memo says one has")
	}
	withAnti := []*corev1.Pod{plain[0], mkPod("c", 100, 128, 0, podAntiAffinity(corev1.LabelHostname, "app", "x"))}
	if _, anti := memo.node(&NodeInfo{Node: n, Pods: withAnti}); !anti {
		t.Fatal("the new pod slice has a pod with anti-affinity, memo missed it")
	}
	n2 := mkNode("n1", 4, 64, 0)
	n2.ResourceVersion = "2"
	if alloc, _ := memo.node(&NodeInfo{Node: n2, Pods: withAnti}); alloc.get(gpuRes) != 0 {
		t.Fatalf("the node lost its GPUs (new resourceVersion), memo says %d", alloc.get(gpuRes))
	}
}
