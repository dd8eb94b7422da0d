package decide

import (
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func gpuNodeInfo(name string, pods ...*corev1.Pod) NodeInfo {
	return ready(mkNode(name, 96, 1024, 8), "gpu", pods...)
}

func cpuNodeInfo(name string, pods ...*corev1.Pod) NodeInfo {
	return ready(mkNode(name, 8, 32, 0), "cpu", pods...)
}

func dsPod(name string) *corev1.Pod {
	return mkPod(name, 500, 512, 0, podOwner("DaemonSet", "ds-uid"))
}

func pdb(name string, allowed int32, kv ...string) policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	return policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: pairs(kv...)}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
	}
}

func removed(p ScaleDownPlan) string {
	var names []string
	for _, r := range p.Remove {
		names = append(names, r.Node)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func TestScaleDown(t *testing.T) {
	t.Parallel()
	sys := func(p *corev1.Pod) { p.Namespace = metav1.NamespaceSystem }
	emptyDir := func(medium corev1.StorageMedium) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium}}}}
		}
	}
	busy := func(name string) *corev1.Pod { return mkPod(name, 6000, 1024, 0, podLabels("app", "busy")) }
	mirror := mkPod("kube-proxy", 100, 64, 0, bare(), podAnnotation(corev1.MirrorPodAnnotationKey, "x"))
	finished := mkPod("done", 100, 64, 0, bare(), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })
	tests := []struct {
		name  string
		nodes []NodeInfo
		pdbs  []policyv1.PodDisruptionBudget
		pools []Pool // default: gpu and cpu pools, min 0, Current = nodes
		want  string
		kept  map[string]string // node → reason prefix
	}{
		{
			name:  "GPU node with only CPU pods is removed when they fit elsewhere",
			nodes: []NodeInfo{gpuNodeInfo("g1", mkPod("cpu-pod", 2000, 1024, 0), dsPod("device-plugin")), cpuNodeInfo("c1", busy("b"))},
			want:  "g1",
			kept:  map[string]string{"c1": "utilization 0.75 is not below threshold 0.50"},
		},
		{
			name:  "idle-GPU rule applies even when CPU pods keep the cpu busy",
			nodes: []NodeInfo{gpuNodeInfo("g1", mkPod("cpu-pod", 80000, 1024, 0)), cpuNodeInfo("c1", busy("b"))},
			kept:  map[string]string{"g1": "pod default/cpu-pod cannot be moved: no other node fits it"},
		},
		{
			name:  "GPU in use keeps the node",
			nodes: []NodeInfo{gpuNodeInfo("g1", mkPod("train", 1000, 1024, 4))},
			kept:  map[string]string{"g1": "utilization 0.50 is not below threshold 0.50"},
		},
		{
			name:  "lightly used GPU node consolidated onto another",
			nodes: []NodeInfo{gpuNodeInfo("g1", mkPod("infer", 1000, 1024, 1)), gpuNodeInfo("g2", mkPod("train", 1000, 1024, 4))},
			want:  "g1",
		},
		{
			name:  "DaemonSet, mirror and finished pods neither block nor move",
			nodes: []NodeInfo{cpuNodeInfo("c1", dsPod("ds"), mirror, finished)},
			want:  "c1",
		},
		{
			name:  "do-not-disrupt pod",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("x", 100, 64, 0, podAnnotation(AnnotationDoNotDisrupt, "true"))), cpuNodeInfo("c2")},
			want:  "c2",
			kept:  map[string]string{"c1": "pod default/x has annotation fke.dev/do-not-disrupt=true"},
		},
		{
			name:  "do-not-disrupt node",
			nodes: []NodeInfo{ready(mkNode("c1", 8, 32, 0, nodeAnnotation(AnnotationDoNotDisrupt, "true")), "cpu")},
			kept:  map[string]string{"c1": "node has annotation fke.dev/do-not-disrupt=true"},
		},
		{
			name:  "Cluster Autoscaler's safe-to-evict=false",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("x", 100, 64, 0, podAnnotation(AnnotationSafeToEvict, "false"))), cpuNodeInfo("c2", busy("b"))},
			kept:  map[string]string{"c1": "pod default/x has annotation cluster-autoscaler.kubernetes.io/safe-to-evict=false"},
		},
		{
			name:  "bare pod blocks",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("x", 100, 64, 0, bare())), cpuNodeInfo("c2", busy("b"))},
			kept:  map[string]string{"c1": "pod default/x is not replicated (no controller)"},
		},
		{
			name:  "bare pod with safe-to-evict=true moves",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("x", 100, 64, 0, bare(), podAnnotation(AnnotationSafeToEvict, "true"))), cpuNodeInfo("c2", busy("b"))},
			want:  "c1",
		},
		{
			name:  "local storage blocks",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("x", 100, 64, 0, emptyDir(""))), cpuNodeInfo("c2", busy("b"))},
			kept:  map[string]string{"c1": "pod default/x has local storage (volume scratch)"},
		},
		{
			name:  "memory emptyDir does not block",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("x", 100, 64, 0, emptyDir(corev1.StorageMediumMemory))), cpuNodeInfo("c2", busy("b"))},
			want:  "c1",
		},
		{
			name:  "PDB with no disruption allowed blocks",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("x", 100, 64, 0)), cpuNodeInfo("c2", busy("b"))},
			pdbs:  []policyv1.PodDisruptionBudget{pdb("web", 0, "app", "web")},
			kept:  map[string]string{"c1": "pod default/x is protected by PodDisruptionBudget default/web (0 disruptions allowed)"},
		},
		{
			name:  "PDB allowing one disruption lets one of two nodes go",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("x", 100, 64, 0)), cpuNodeInfo("c2", mkPod("y", 100, 64, 0)), cpuNodeInfo("c3", busy("b"))},
			pdbs:  []policyv1.PodDisruptionBudget{pdb("web", 1, "app", "web")},
			want:  "c1",
			kept:  map[string]string{"c2": "pod default/y is protected by PodDisruptionBudget default/web (0 disruptions allowed)"},
		},
		{
			name:  "kube-system pod without PDB blocks",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("coredns", 100, 64, 0, sys)), cpuNodeInfo("c2", busy("b"))},
			kept:  map[string]string{"c1": "kube-system pod kube-system/coredns has no PodDisruptionBudget"},
		},
		{
			name:  "kube-system pod with PDB moves",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("coredns", 100, 64, 0, sys)), cpuNodeInfo("c2", busy("b"))},
			pdbs: []policyv1.PodDisruptionBudget{func() policyv1.PodDisruptionBudget {
				d := pdb("coredns", 1, "app", "web")
				d.Namespace = metav1.NamespaceSystem
				return d
			}()},
			want: "c1",
		},
		{
			name:  "min size respected",
			nodes: []NodeInfo{cpuNodeInfo("c1"), cpuNodeInfo("c2"), cpuNodeInfo("c3", busy("b"))},
			pools: []Pool{{Name: "cpu", MinSize: 2, MaxSize: 10, Current: 3}},
			want:  "c1",
			kept:  map[string]string{"c2": "pool cpu at min size 2"},
		},
		{
			name:  "nodes being deleted count against min size",
			nodes: []NodeInfo{cpuNodeInfo("c1"), cpuNodeInfo("c2", busy("b")), {Node: mkNode("c3", 8, 32, 0), Pool: "cpu", Deleting: true}},
			pools: []Pool{{Name: "cpu", MinSize: 2, MaxSize: 10, Current: 3}},
			kept:  map[string]string{"c1": "pool cpu at min size 2"},
		},
		{
			name:  "pods do not move to GPU nodes that are themselves candidates",
			nodes: []NodeInfo{gpuNodeInfo("g1", mkPod("a", 1000, 1024, 0)), gpuNodeInfo("g2", mkPod("b", 1000, 1024, 0))},
			kept: map[string]string{
				"g1": "pod default/a cannot be moved: no other node fits it",
				"g2": "pod default/b cannot be moved: no other node fits it",
			},
		},
		{
			name:  "pods moved off one node are not moved onto a node removed in the same plan",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("a", 1000, 1024, 0)), cpuNodeInfo("c2", mkPod("b", 1000, 1024, 0))},
			want:  "c1",
			kept:  map[string]string{"c2": "pod default/b cannot be moved"},
		},
		{
			name:  "moved pods respect anti-affinity",
			nodes: []NodeInfo{cpuNodeInfo("c1", mkPod("a", 100, 64, 0, podAntiAffinity(corev1.LabelHostname, "app", "web"))), cpuNodeInfo("c2", mkPod("b", 6000, 64, 0))},
			kept:  map[string]string{"c1": "pod default/a cannot be moved"},
		},
		{
			name:  "node of no pool, not ready",
			nodes: []NodeInfo{ready(mkNode("x", 8, 32, 0), "other"), {Node: mkNode("c1", 8, 32, 0), Pool: "cpu"}},
			kept:  map[string]string{"x": "node is not in an autoscaled pool", "c1": "node is not ready"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pools := tt.pools
			if pools == nil {
				counts := map[string]int{}
				for _, n := range tt.nodes {
					counts[n.Pool]++
				}
				pools = []Pool{{Name: "gpu", MaxSize: 10, Current: counts["gpu"]}, {Name: "cpu", MaxSize: 10, Current: counts["cpu"]}}
			}
			since := map[string]time.Time{}
			for _, n := range tt.nodes {
				since[n.Node.Name] = t0.Add(-time.Hour)
			}
			plan := ScaleDown(Snapshot{Nodes: tt.nodes, PDBs: tt.pdbs}, pools, since, t0)
			if got := removed(plan); got != tt.want {
				t.Fatalf("removed = %q, want %q; kept %v", got, tt.want, plan.Kept)
			}
			for node, want := range tt.kept {
				if !strings.HasPrefix(plan.Kept[node], want) {
					t.Errorf("kept[%s] = %q, want %q", node, plan.Kept[node], want)
				}
			}
			for _, r := range plan.Remove {
				if _, ok := plan.Kept[r.Node]; ok {
					t.Errorf("node %s both removed and kept", r.Node)
				}
			}
		})
	}
}

func TestScaleDownRemovalDetails(t *testing.T) {
	t.Parallel()
	nodes := []NodeInfo{gpuNodeInfo("g1", mkPod("cpu-pod", 2000, 1024, 0), dsPod("device-plugin")), cpuNodeInfo("c1")}
	pools := []Pool{{Name: "gpu", MaxSize: 4, Current: 1}, {Name: "cpu", MaxSize: 4, Current: 1, MinSize: 1}}
	plan := ScaleDown(Snapshot{Nodes: nodes}, pools, map[string]time.Time{"g1": t0.Add(-time.Hour)}, t0)
	if len(plan.Remove) != 1 {
		t.Fatalf("remove = %+v, kept %v", plan.Remove, plan.Kept)
	}
	r := plan.Remove[0]
	if r.Node != "g1" || r.Pool != "gpu" || r.Reason != "no GPU allocated" || !r.UnneededSince.Equal(t0.Add(-time.Hour)) ||
		len(r.Evict) != 1 || r.Evict[0].Name != "cpu-pod" {
		t.Fatalf("removal = %+v", r)
	}
}

func TestScaleDownUnneededTime(t *testing.T) {
	t.Parallel()
	nodes := func(gpuPod bool) []NodeInfo {
		var pods []*corev1.Pod
		if gpuPod {
			pods = append(pods, mkPod("train", 1000, 1024, 8))
		}
		return []NodeInfo{gpuNodeInfo("g1", append(pods, mkPod("cpu-pod", 1000, 1024, 0))...), cpuNodeInfo("c1", mkPod("b", 6000, 1024, 0))}
	}
	pools := []Pool{{Name: "gpu", MaxSize: 4, Current: 1}, {Name: "cpu", MaxSize: 4, Current: 1, MinSize: 1}}

	var since map[string]time.Time
	step := func(at time.Time, gpuPod bool) ScaleDownPlan {
		t.Helper()
		in := since
		var before map[string]time.Time
		if in != nil {
			before = map[string]time.Time{}
			for k, v := range in {
				before[k] = v
			}
		}
		plan := ScaleDown(Snapshot{Nodes: nodes(gpuPod)}, pools, in, at)
		for k, v := range before {
			if !in[k].Equal(v) {
				t.Fatalf("input map modified")
			}
		}
		since = plan.UnneededSince
		return plan
	}

	p := step(t0, false)
	if removed(p) != "" || !since["g1"].Equal(t0) || !strings.HasPrefix(p.Kept["g1"], "unneeded for 0s, removable after 10m0s") {
		t.Fatalf("t0: removed %q since %v kept %q", removed(p), since, p.Kept["g1"])
	}
	p = step(t0.Add(5*time.Minute), false)
	if removed(p) != "" || !since["g1"].Equal(t0) || !strings.HasPrefix(p.Kept["g1"], "unneeded for 5m0s") {
		t.Fatalf("t0+5m: removed %q since %v kept %q", removed(p), since, p.Kept["g1"])
	}
	// A GPU pod arrives: no longer unneeded, the clock resets.
	p = step(t0.Add(7*time.Minute), true)
	if _, ok := since["g1"]; ok || removed(p) != "" {
		t.Fatalf("t0+7m: since %v removed %q", since, removed(p))
	}
	p = step(t0.Add(8*time.Minute), false)
	if !since["g1"].Equal(t0.Add(8 * time.Minute)) {
		t.Fatalf("t0+8m: since %v", since)
	}
	p = step(t0.Add(17*time.Minute), false)
	if removed(p) != "" {
		t.Fatalf("t0+17m: removed too early")
	}
	p = step(t0.Add(18*time.Minute), false)
	if removed(p) != "g1" {
		t.Fatalf("t0+18m: removed %q, kept %v", removed(p), p.Kept)
	}

	// A per-pool unneeded time.
	pools[0].ScaleDownUnneededTime = 2 * time.Minute
	since = map[string]time.Time{"g1": t0}
	if p := step(t0.Add(2*time.Minute), false); removed(p) != "g1" {
		t.Fatalf("custom unneeded time: removed %q", removed(p))
	}
}

func TestScaleDownThreshold(t *testing.T) {
	t.Parallel()
	nodes := []NodeInfo{cpuNodeInfo("c1", mkPod("a", 5000, 1024, 0)), cpuNodeInfo("c2")}
	since := map[string]time.Time{"c1": t0.Add(-time.Hour), "c2": t0.Add(-time.Hour)}
	// 62.5% used: kept at the default threshold, a candidate at 0.7 (and its
	// pod fits on c2 once c2 is ... kept by min size).
	pools := []Pool{{Name: "cpu", MaxSize: 4, Current: 2, MinSize: 1, ScaleDownUtilizationThreshold: 0.7}}
	plan := ScaleDown(Snapshot{Nodes: nodes}, pools, since, t0)
	if removed(plan) != "c2" {
		t.Fatalf("removed %q kept %v", removed(plan), plan.Kept)
	}
	pools[0].ScaleDownUtilizationThreshold = 0
	plan = ScaleDown(Snapshot{Nodes: nodes}, pools, since, t0)
	if !strings.HasPrefix(plan.Kept["c1"], "utilization 0.62 is not below threshold 0.50") {
		t.Fatalf("kept %v", plan.Kept)
	}
}
