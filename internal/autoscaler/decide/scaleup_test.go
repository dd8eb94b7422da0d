package decide

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestScaleUpPacking(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		pending []*corev1.Pod
		pools   []Pool
		nodes   []NodeInfo
		limits  Limits
		want    string            // increases
		reasons map[string]string // pod → NotTriggerScaleUp reason (prefix)
		fit     []string          // pods expected Schedulable
	}{
		{
			name:    "3 pods x 8 GPUs on 8-GPU template need 3 nodes",
			pending: mkPods("p", 3, 1000, 1024, 8, tolerateGPU()),
			pools:   []Pool{gpuPool("gpu", 8, 0, 10)},
			want:    "gpu+3",
		},
		{
			name:    "5 pods x 4 GPUs need 3 nodes",
			pending: mkPods("p", 5, 1000, 1024, 4, tolerateGPU()),
			pools:   []Pool{gpuPool("gpu", 8, 0, 10)},
			want:    "gpu+3",
		},
		{
			name:    "mixed sizes packed decreasing",
			pending: append(append(mkPods("small", 4, 1000, 1024, 2, tolerateGPU()), mkPods("big", 2, 1000, 1024, 6, tolerateGPU())...), mkPods("mid", 1, 1000, 1024, 4, tolerateGPU())...),
			pools:   []Pool{gpuPool("gpu", 8, 0, 10)},
			want:    "gpu+3", // 6+2, 6+2, 4+2+2
		},
		{
			name:    "scale from zero uses the template",
			pending: mkPods("p", 2, 1000, 1024, 1, tolerateGPU()),
			pools:   []Pool{gpuPool("gpu", 1, 0, 4)},
			want:    "gpu+2",
		},
		{
			// One ReplicaSet whose pods have other requests (set per pod by
			// an admission webhook): a smaller pod still gets the room that
			// nodes turned down for a bigger one.
			name: "pods of one group with other requests: new nodes",
			pending: append(append(mkPods("a", 1, 6000, 1024, 0), mkPods("b", 2, 4000, 1024, 0)...),
				mkPods("c", 1, 2000, 1024, 0)...),
			pools: []Pool{cpuPool("cpu", 0, 10)},
			want:  "cpu+2", // 6+2, 4+4
		},
		{
			name:    "pods of one group with other requests: existing nodes",
			pending: append(mkPods("big", 1, 2000, 1024, 0), mkPods("small", 1, 1000, 1024, 0)...),
			pools:   []Pool{cpuPool("cpu", 2, 10)},
			nodes:   []NodeInfo{ready(mkNode("a", 1, 32, 0), "cpu"), ready(mkNode("b", 2, 32, 0), "cpu")},
			fit:     []string{"big-0", "small-0"},
		},
		{
			// A node that turned a pod down for its spread can take the next
			// one once the first raised the minimum.
			name:    "spread: node turned down for skew fits the next pod",
			pending: mkPods("s", 2, 1000, 1024, 0, spread(corev1.LabelHostname, 1, "app", "web")),
			pools:   []Pool{cpuPool("cpu", 2, 10)},
			nodes: []NodeInfo{
				ready(mkNode("a", 4, 32, 0), "cpu", mkPod("running", 1000, 1024, 0)),
				ready(mkNode("b", 1, 32, 0), "cpu"),
			},
			fit: []string{"s-0", "s-1"},
		},
		{
			name:    "fits existing free capacity: no scale-up",
			pending: mkPods("p", 2, 1000, 1024, 2, tolerateGPU()),
			pools:   []Pool{gpuPool("gpu", 8, 1, 4)},
			nodes:   []NodeInfo{ready(gpuPool("gpu", 8, 0, 0).Template, "gpu", mkPod("busy", 0, 0, 4))},
			fit:     []string{"p-0", "p-1"},
		},
		{
			name:    "existing node not ready is not capacity",
			pending: mkPods("p", 1, 1000, 1024, 2, tolerateGPU()),
			pools:   []Pool{gpuPool("gpu", 8, 1, 4)},
			nodes:   []NodeInfo{{Node: gpuPool("gpu", 8, 0, 0).Template, Pool: "gpu"}},
			want:    "gpu+1",
		},
		{
			name:    "upcoming machine prevents a duplicate",
			pending: mkPods("p", 1, 1000, 1024, 8, tolerateGPU()),
			pools:   []Pool{withUpcoming(gpuPool("gpu", 8, 0, 4), 1)},
			fit:     []string{"p-0"},
		},
		{
			name:    "upcoming machine absorbs one of two",
			pending: mkPods("p", 2, 1000, 1024, 8, tolerateGPU()),
			pools:   []Pool{withUpcoming(gpuPool("gpu", 8, 0, 4), 1)},
			want:    "gpu+1",
			fit:     []string{"p-0"},
		},
		{
			name:    "max size caps the increase",
			pending: mkPods("p", 5, 1000, 1024, 8, tolerateGPU()),
			pools:   []Pool{gpuPool("gpu", 8, 1, 4)},
			want:    "gpu+3",
			reasons: map[string]string{"p-3": "pod didn't fit any node pool: 1 max size reached", "p-4": "pod didn't fit any node pool: 1 max size reached"},
		},
		{
			name:    "upcoming counts towards max size",
			pending: mkPods("p", 3, 1000, 1024, 8, tolerateGPU()),
			pools:   []Pool{withUpcoming(gpuPool("gpu", 8, 1, 3), 1)},
			want:    "gpu+1",
			fit:     []string{"p-0"},
			reasons: map[string]string{"p-2": "pod didn't fit any node pool: 1 max size reached"},
		},
		{
			name:    "cluster MaxGPUs caps the increase",
			pending: mkPods("p", 3, 1000, 1024, 8, tolerateGPU()),
			pools:   []Pool{gpuPool("gpu", 8, 1, 10)},
			nodes:   []NodeInfo{ready(gpuPool("gpu", 8, 0, 0).Template, "gpu", mkPod("busy", 0, 0, 8))},
			limits:  Limits{MaxGPUs: 20},
			want:    "gpu+1",
			reasons: map[string]string{"p-2": "pod didn't fit any node pool: 1 max cluster GPUs limit reached"},
		},
		{
			name:    "cluster MaxNodes caps the increase",
			pending: mkPods("p", 3, 1000, 1024, 8, tolerateGPU()),
			pools:   []Pool{gpuPool("gpu", 8, 0, 10)},
			nodes:   []NodeInfo{ready(mkNode("other", 4, 8, 0), "")},
			limits:  Limits{MaxNodes: 3},
			want:    "gpu+2",
			reasons: map[string]string{"p-2": "pod didn't fit any node pool: 1 max cluster nodes limit reached"},
		},
		{
			name:    "backing-off pool skipped, another pool grows",
			pending: mkPods("p", 1, 1000, 1024, 8, tolerateGPU()),
			pools:   []Pool{withBackoff(gpuPool("gpu-a", 8, 0, 4), t0.Add(time.Minute)), gpuPool("gpu-b", 8, 0, 4)},
			want:    "gpu-b+1",
		},
		{
			name:    "backoff over: pool used again",
			pending: mkPods("p", 1, 1000, 1024, 8, tolerateGPU()),
			pools:   []Pool{withBackoff(gpuPool("gpu-a", 8, 0, 4), t0.Add(-time.Second))},
			want:    "gpu-a+1",
		},
		{
			name:    "only pool backing off",
			pending: mkPods("p", 1, 1000, 1024, 8, tolerateGPU()),
			pools:   []Pool{withBackoff(gpuPool("gpu", 8, 0, 4), t0.Add(time.Minute))},
			reasons: map[string]string{"p-0": "pod didn't fit any node pool: 1 pool backing off"},
		},
		{
			name:    "aggregated reasons",
			pending: mkPods("p", 1, 1000, 1024, 16, tolerateGPU()),
			pools:   []Pool{gpuPool("gpu-a", 8, 0, 4), gpuPool("gpu-b", 8, 0, 4), gpuPool("gpu-c", 16, 4, 4)},
			reasons: map[string]string{"p-0": "pod didn't fit any node pool: 2 Insufficient nvidia.com/gpu, 1 max size reached"},
		},
		{
			name:    "untolerated taint reported",
			pending: mkPods("p", 1, 1000, 1024, 1),
			pools:   []Pool{gpuPool("gpu", 8, 0, 4)},
			reasons: map[string]string{"p-0": "pod didn't fit any node pool: 1 node(s) had untolerated taint {nvidia.com/gpu: present}"},
		},
		{
			name:    "no pools",
			pending: mkPods("p", 1, 1000, 1024, 1),
			reasons: map[string]string{"p-0": "no node pools"},
		},
		{
			name:    "two pools grow in one plan",
			pending: append(mkPods("gpu", 2, 1000, 1024, 8, tolerateGPU()), mkPods("cpu", 3, 3000, 1024, 0)...),
			pools:   []Pool{gpuPool("gpu", 8, 0, 4), cpuPool("cpu", 0, 10)},
			want:    "cpu+2,gpu+2",
		},
		{
			name:    "hostname anti-affinity: one replica per node",
			pending: mkPods("p", 3, 1000, 1024, 1, tolerateGPU(), podAntiAffinity(corev1.LabelHostname, "app", "web")),
			pools:   []Pool{gpuPool("gpu", 8, 0, 10)},
			want:    "gpu+3",
		},
		{
			name:    "zone anti-affinity: second replica cannot go to the pool's zone",
			pending: mkPods("p", 2, 1000, 1024, 1, tolerateGPU(), podAntiAffinity(corev1.LabelTopologyZone, "app", "web")),
			pools:   []Pool{gpuPool("gpu", 8, 0, 10)},
			want:    "gpu+1",
			reasons: map[string]string{"p-1": "pod didn't fit any node pool: 1 node(s) didn't match pod anti-affinity rules"},
		},
		{
			// c1 is full; c2 has room but already two replicas: skew
			// forbids it, so a new node (a new, empty domain) is needed.
			name:    "hostname spread needs a new node",
			pending: mkPods("p", 1, 100, 64, 0, spread(corev1.LabelHostname, 1, "app", "web")),
			pools:   []Pool{cpuPool("cpu", 2, 10)},
			nodes: []NodeInfo{
				ready(mkNode("c1", 8, 32, 0, nodeLabels(corev1.LabelTopologyZone, "z1")), "cpu", mkPod("filler", 7950, 0, 0, podLabels("app", "other"))),
				ready(mkNode("c2", 8, 32, 0, nodeLabels(corev1.LabelTopologyZone, "z1")), "cpu", mkPods("w", 2, 100, 64, 0)...),
			},
			want: "cpu+1",
		},
		{
			name:    "hostname spread: existing room used first",
			pending: mkPods("p", 2, 100, 64, 0, spread(corev1.LabelHostname, 1, "app", "web")),
			pools:   []Pool{cpuPool("cpu", 2, 10)},
			nodes: []NodeInfo{
				ready(mkNode("c1", 8, 32, 0), "cpu", mkPod("w", 100, 64, 0)),
				ready(mkNode("c2", 8, 32, 0), "cpu"),
			},
			fit: []string{"p-0", "p-1"},
		},
		{
			// Zone z1 already has two replicas, z2 none; both zones' nodes
			// are full. Only the z2 pool may grow.
			name:    "zone spread picks the pool of the emptier zone",
			pending: mkPods("p", 1, 100, 64, 0, spread(corev1.LabelTopologyZone, 1, "app", "web")),
			pools:   []Pool{cpuPool("cpu-z1", 1, 10), zonePool(cpuPool("cpu-z2", 1, 10), "z2")},
			nodes: []NodeInfo{
				ready(mkNode("a", 8, 32, 0, nodeLabels(corev1.LabelTopologyZone, "z1")), "cpu-z1", append(mkPods("w", 2, 100, 64, 0), mkPod("filler", 7750, 0, 0, podLabels("app", "other")))...),
				ready(mkNode("b", 8, 32, 0, nodeLabels(corev1.LabelTopologyZone, "z2")), "cpu-z2", mkPod("filler2", 7950, 0, 0, podLabels("app", "other"))),
			},
			want: "cpu-z2+1",
		},
		{
			name:    "pod affinity: a group lands on one new node",
			pending: mkPods("p", 2, 1000, 1024, 4, tolerateGPU(), podAffinity(corev1.LabelHostname, "app", "web")),
			pools:   []Pool{gpuPool("gpu", 8, 0, 10)},
			want:    "gpu+1",
		},
		{
			name:    "pod affinity to a pod on a full node cannot be helped",
			pending: mkPods("p", 1, 1000, 1024, 0, podAffinity(corev1.LabelHostname, "app", "db")),
			pools:   []Pool{cpuPool("cpu", 1, 10)},
			nodes:   []NodeInfo{ready(mkNode("c1", 8, 32, 0), "cpu", mkPod("db", 8000, 0, 0, podLabels("app", "db")))},
			reasons: map[string]string{"p-0": "pod didn't fit any node pool: 1 node(s) didn't match pod affinity rules"},
		},
		{
			name:    "start-up taints on the template are ignored",
			pending: mkPods("p", 1, 1000, 1024, 0),
			pools: []Pool{func() Pool {
				p := cpuPool("cpu", 0, 3)
				p.Template.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
					{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
				return p
			}()},
			want: "cpu+1",
		},
		{
			name:    "pods placed in queue order: higher priority first",
			pending: append(mkPods("low", 1, 1000, 1024, 8, tolerateGPU()), mkPods("high", 1, 1000, 1024, 8, tolerateGPU(), func(p *corev1.Pod) { prio := int32(100); p.Spec.Priority = &prio })...),
			pools:   []Pool{withUpcoming(gpuPool("gpu", 8, 0, 1), 1)},
			fit:     []string{"high-0"},
			reasons: map[string]string{"low-0": "pod didn't fit any node pool: 1 max size reached"},
		},
		{
			name:    "scale from zero with MIG resources",
			pending: mkPods("p", 3, 100, 64, 0, tolerateGPU(), podRequest("nvidia.com/mig-1g.10gb", "3")),
			pools: []Pool{{Name: "mig", MaxSize: 5, Template: mkNode("t", 32, 128, 0, nodeAlloc("nvidia.com/mig-1g.10gb", "7"),
				nodeTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule))}},
			want: "mig+2",
		},
		{
			name:    "DaemonSet overhead is subtracted from the template",
			pending: mkPods("p", 2, 4000, 1024, 0),
			pools:   []Pool{withOverhead(cpuPool("cpu", 0, 10), corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")})},
			want:    "cpu+2", // 8 cores less 0.5 cannot hold 2 × 4
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := ScaleUp(Snapshot{Nodes: tt.nodes, Pending: tt.pending, Limits: tt.limits}, tt.pools, Expander{}, t0)
			if got := increases(plan); got != tt.want {
				t.Fatalf("increases = %q, want %q; not triggered: %v", got, tt.want, reasonsOf(plan))
			}
			got := reasonsOf(plan)
			for pod, want := range tt.reasons {
				if !strings.HasPrefix(got[pod], want) {
					t.Errorf("reason for %s = %q, want %q", pod, got[pod], want)
				}
			}
			var fit []string
			for _, s := range plan.Schedulable {
				fit = append(fit, s.Pod.Name)
			}
			if strings.Join(fit, ",") != strings.Join(tt.fit, ",") {
				t.Errorf("schedulable = %v, want %v", fit, tt.fit)
			}
			// Every pending pod is accounted for exactly once.
			seen := map[string]int{}
			for _, inc := range plan.Increases {
				for _, p := range inc.Pods {
					seen[p.Name]++
				}
			}
			for _, s := range plan.Schedulable {
				seen[s.Pod.Name]++
			}
			for _, r := range plan.NotTriggerScaleUp {
				seen[r.Pod.Name]++
			}
			for _, p := range tt.pending {
				if seen[p.Name] != 1 {
					t.Errorf("pod %s accounted %d times", p.Name, seen[p.Name])
				}
			}
		})
	}
}

func zonePool(p Pool, zone string) Pool {
	p.Template.Labels[corev1.LabelTopologyZone] = zone
	return p
}

func withUpcoming(p Pool, n int) Pool { p.Upcoming = n; return p }

func withBackoff(p Pool, until time.Time) Pool { p.BackoffUntil = until; return p }

func withOverhead(p Pool, l corev1.ResourceList) Pool { p.DaemonSetOverhead = l; return p }

func withPrice(p Pool, price float64) Pool { p.PricePerHour = price; return p }

func withPriority(p Pool, prio int) Pool { p.Priority = prio; return p }

func TestScaleUpUpcomingIsAnnotated(t *testing.T) {
	t.Parallel()
	plan := ScaleUp(Snapshot{Pending: mkPods("p", 1, 1000, 1024, 8, tolerateGPU())},
		[]Pool{withUpcoming(gpuPool("gpu", 8, 0, 4), 1)}, Expander{}, t0)
	if len(plan.Schedulable) != 1 || !plan.Schedulable[0].Upcoming || plan.Schedulable[0].Node != "upcoming-gpu-0" || plan.Schedulable[0].Pool != "gpu" {
		t.Fatalf("schedulable = %+v", plan.Schedulable)
	}
}

func TestScaleUpNewSize(t *testing.T) {
	t.Parallel()
	plan := ScaleUp(Snapshot{Pending: mkPods("p", 2, 1000, 1024, 8, tolerateGPU())},
		[]Pool{withUpcoming(gpuPool("gpu", 8, 2, 10), 1)}, Expander{}, t0)
	if len(plan.Increases) != 1 || plan.Increases[0].NewSize != 4 || plan.Increases[0].Delta != 1 {
		t.Fatalf("increases = %+v", plan.Increases)
	}
}

func TestExpanders(t *testing.T) {
	t.Parallel()
	// Three GPU instance types; the L4 pool does not have the memory the
	// pod needs.
	h100x8 := withPrice(gpuPool("h100x8", 8, 0, 10), 30)
	a100x1 := withPrice(gpuPool("a100x1", 1, 0, 10), 4)
	a100x1.Template.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("128Gi")
	l4x1 := withPrice(gpuPool("l4x1", 1, 0, 10), 1)
	l4x1.Template.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("16Gi")
	pod := func() []*corev1.Pod { return mkPods("p", 1, 1000, 64*1024, 1, tolerateGPU()) }

	tests := []struct {
		name     string
		pools    []Pool
		expander Expander
		pending  []*corev1.Pod
		want     string
	}{
		{"least-waste prefers the 1-GPU node for a 1-GPU pod", []Pool{h100x8, a100x1}, Expander{}, pod(), "a100x1+1"},
		{"least-waste takes the 8-GPU node for 8 pods", []Pool{h100x8, withPrice(gpuPool("x4", 4, 0, 10), 1)}, Expander{Name: ExpanderLeastWaste},
			mkPods("p", 8, 1000, 1024, 1, tolerateGPU()), "h100x8+1"},
		{"price: the cheapest instance type that fits wins", []Pool{h100x8, a100x1, l4x1}, Expander{Name: ExpanderPrice}, pod(), "a100x1+1"},
		{"price: one big node cheaper per pod than many small", []Pool{withPrice(gpuPool("big", 8, 0, 10), 20), withPrice(gpuPool("small", 1, 0, 10), 3)},
			Expander{Name: ExpanderPrice}, mkPods("p", 8, 1000, 1024, 1, tolerateGPU()), "big+1"},
		{"price: unknown price loses", []Pool{withPrice(gpuPool("free", 1, 0, 10), 0), withPrice(gpuPool("paid", 1, 0, 10), 9)},
			Expander{Name: ExpanderPrice}, pod(), "paid+1"},
		{"priority: highest priority wins even if wasteful", []Pool{withPriority(h100x8, 10), withPriority(a100x1, 5)}, Expander{Name: ExpanderPriority}, pod(), "h100x8+1"},
		{"priority: tie goes to least-waste", []Pool{withPriority(h100x8, 5), withPriority(a100x1, 5)}, Expander{Name: ExpanderPriority}, pod(), "a100x1+1"},
		{"unknown expander falls back to least-waste", []Pool{h100x8, a100x1}, Expander{Name: "bogus"}, pod(), "a100x1+1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := ScaleUp(Snapshot{Pending: tt.pending}, tt.pools, tt.expander, t0)
			if got := increases(plan); got != tt.want {
				t.Fatalf("increases = %q, want %q (%v)", got, tt.want, reasonsOf(plan))
			}
		})
	}
}

func TestRandomExpanderIsSeeded(t *testing.T) {
	t.Parallel()
	pools := []Pool{gpuPool("a", 8, 0, 10), gpuPool("b", 8, 0, 10), gpuPool("c", 8, 0, 10)}
	chosen := map[string]bool{}
	for seed := uint64(0); seed < 32; seed++ {
		run := func() string {
			e := Expander{Name: ExpanderRandom, Rand: rand.New(rand.NewPCG(seed, 1))}
			return increases(ScaleUp(Snapshot{Pending: mkPods("p", 1, 1000, 1024, 8, tolerateGPU())}, pools, e, t0))
		}
		first := run()
		if again := run(); again != first {
			t.Fatalf("seed %d: %q then %q", seed, first, again)
		}
		chosen[first] = true
	}
	if len(chosen) < 2 {
		t.Fatalf("random expander always chose %v", chosen)
	}
	// Without a source it is still a function of now.
	e := Expander{Name: ExpanderRandom}
	a := increases(ScaleUp(Snapshot{Pending: mkPods("p", 1, 1000, 1024, 8, tolerateGPU())}, pools, e, t0))
	b := increases(ScaleUp(Snapshot{Pending: mkPods("p", 1, 1000, 1024, 8, tolerateGPU())}, pools, e, t0))
	if a != b {
		t.Fatalf("nil Rand not deterministic: %q vs %q", a, b)
	}
}

func TestCPUPodNeverGrowsGPUPool(t *testing.T) {
	t.Parallel()
	// The GPU pool's template tolerates everything (no taint), is cheaper
	// per pod, has higher priority and would waste less cpu: the rule must
	// still keep CPU-only pods off it.
	gpu := gpuPool("gpu", 8, 0, 10)
	gpu.Template.Spec.Taints = nil
	gpu.PricePerHour = 0.01
	gpu.Priority = 100
	cpu := cpuPool("cpu", 0, 10)
	cpuPods := func() []*corev1.Pod { return mkPods("c", 4, 3000, 1024, 0) }
	for _, e := range []ExpanderName{ExpanderLeastWaste, ExpanderPrice, ExpanderPriority, ExpanderRandom} {
		t.Run(string(e), func(t *testing.T) {
			for seed := uint64(0); seed < 8; seed++ {
				plan := ScaleUp(Snapshot{Pending: cpuPods()}, []Pool{gpu, cpu}, Expander{Name: e, Rand: rand.New(rand.NewPCG(seed, 2))}, t0)
				if got := increases(plan); got != "cpu+2" {
					t.Fatalf("increases = %q, want cpu+2", got)
				}
			}
		})
	}
	t.Run("GPU pool allowed when no CPU pool fits", func(t *testing.T) {
		plan := ScaleUp(Snapshot{Pending: mkPods("big", 1, 32000, 1024, 0)}, []Pool{gpu, cpu}, Expander{}, t0)
		if got := increases(plan); got != "gpu+1" {
			t.Fatalf("increases = %q, want gpu+1", got)
		}
	})
	t.Run("GPU pool allowed when the CPU pool is at max size", func(t *testing.T) {
		plan := ScaleUp(Snapshot{Pending: cpuPods()}, []Pool{gpu, cpuPool("cpu", 10, 10)}, Expander{}, t0)
		if got := increases(plan); got != "gpu+1" {
			t.Fatalf("increases = %q, want gpu+1", got)
		}
	})
	t.Run("pod fitting no pool grows nothing", func(t *testing.T) {
		plan := ScaleUp(Snapshot{Pending: mkPods("c", 1, 3000, 1024, 0, nodeSelector("kind", "none"))}, []Pool{gpu, cpu}, Expander{}, t0)
		if len(plan.Increases) != 0 {
			t.Fatalf("unexpected increases %v", increases(plan))
		}
	})
	t.Run("least-waste alone penalises GPU waste", func(t *testing.T) {
		// Even without the rule, least-waste ranks the CPU pool first.
		su := &scaleUp{pools: []Pool{gpu, cpu}}
		g := &option{pool: 0, pods: make([]*podInfo, 4), nodes: make([]*simNode, 1), gpuWaste: 1, cpuMemWaste: 0}
		c := &option{pool: 1, pods: make([]*podInfo, 4), nodes: make([]*simNode, 2), gpuWaste: 0, cpuMemWaste: 0.3}
		if su.compareWaste(c, g) >= 0 {
			t.Fatal("CPU option should beat a GPU option that wastes all its GPUs")
		}
	})
}

func TestScaleUpWarnings(t *testing.T) {
	t.Parallel()
	plan := ScaleUp(Snapshot{Pending: mkPods("p", 1, 100, 64, 0)}, []Pool{{Name: "empty", MaxSize: 3}, cpuPool("cpu", 0, 3), cpuPool("cpu", 0, 3)}, Expander{}, t0)
	if len(plan.Warnings) != 2 {
		t.Fatalf("warnings = %v", plan.Warnings)
	}
	if got := increases(plan); got != "cpu+1" {
		t.Fatalf("increases = %q", got)
	}
}

func TestScaleUpSkipsGatedAndTerminating(t *testing.T) {
	t.Parallel()
	gated := mkPod("gated", 100, 64, 0, func(p *corev1.Pod) { p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue"}} })
	plan := ScaleUp(Snapshot{Pending: []*corev1.Pod{gated}}, []Pool{cpuPool("cpu", 0, 3)}, Expander{}, t0)
	if len(plan.Increases) != 0 || reasonsOf(plan)["gated"] != reasonPodGated {
		t.Fatalf("plan = %+v", plan)
	}
}
