package decide

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	provreqv1 "fke.dev/fke/internal/autoscaler/provreq/v1"
)

func TestScaleUpAtomic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		pool   Pool
		pods   []*corev1.Pod
		nodes  []NodeInfo
		limits Limits
		now    time.Time
		want   int
		ok     bool
		reason string
		retry  bool
	}{
		{"gang fits in 4 new nodes", gpuPool("gpu", 8, 0, 4), mkPods("w", 8, 1000, 1024, 4, tolerateGPU()), nil, Limits{}, t0, 4, true, "", false},
		{"max size: need 4, 3 allowed", gpuPool("gpu", 8, 1, 4), mkPods("w", 8, 1000, 1024, 4, tolerateGPU()), nil, Limits{}, t0, 4, false,
			"max size of pool gpu reached: need 4, 3 allowed", true},
		{"upcoming counts against max size", withUpcoming(gpuPool("gpu", 8, 0, 4), 2), mkPods("w", 4, 1000, 1024, 8, tolerateGPU()), nil, Limits{}, t0, 4, false,
			"max size of pool gpu reached: need 4, 2 allowed", true},
		{"existing free capacity is not used", gpuPool("gpu", 8, 1, 4), mkPods("w", 1, 1000, 1024, 8, tolerateGPU()),
			[]NodeInfo{ready(gpuPool("gpu", 8, 0, 0).Template, "gpu")}, Limits{}, t0, 1, true, "", false},
		{"a pod that fits no node of the pool", gpuPool("gpu", 8, 0, 4), append(mkPods("w", 2, 1000, 1024, 8, tolerateGPU()), mkPod("huge", 1000, 1024, 16, tolerateGPU())), nil, Limits{}, t0, 0, false,
			"pod default/huge didn't fit pool gpu: Insufficient nvidia.com/gpu", false},
		{"cluster GPU limit", gpuPool("gpu", 8, 1, 10), mkPods("w", 2, 1000, 1024, 8, tolerateGPU()), nil, Limits{MaxGPUs: 16}, t0, 2, false,
			"max cluster GPUs limit reached: need 16 GPUs, 8 allowed", true},
		{"cluster node limit", gpuPool("gpu", 8, 1, 10), mkPods("w", 2, 1000, 1024, 8, tolerateGPU()), nil, Limits{MaxNodes: 2}, t0, 2, false,
			"max cluster nodes limit reached: need 2 nodes, 1 allowed", true},
		{"backing off", withBackoff(gpuPool("gpu", 8, 0, 4), t0.Add(time.Minute)), mkPods("w", 1, 1000, 1024, 8, tolerateGPU()), nil, Limits{}, t0, 0, false,
			"pool gpu backing off", true},
		{"anti-affinity gang: one per node", gpuPool("gpu", 8, 0, 4), mkPods("w", 3, 1000, 1024, 1, tolerateGPU(), podAntiAffinity(corev1.LabelHostname, "app", "web")),
			nil, Limits{}, t0, 3, true, "", false},
		{"no pods", gpuPool("gpu", 8, 0, 4), nil, nil, Limits{}, t0, 0, true, "", false},
		{"more than max size at all: never", gpuPool("gpu", 8, 0, 3), mkPods("w", 4, 1000, 1024, 8, tolerateGPU()), nil, Limits{}, t0, 4, false,
			"max size of pool gpu reached: need 4, 3 allowed", false},
		{"more than the cluster GPU limit at all: never", gpuPool("gpu", 8, 0, 10), mkPods("w", 3, 1000, 1024, 8, tolerateGPU()), nil, Limits{MaxGPUs: 16}, t0, 3, false,
			"max cluster GPUs limit reached: need 24 GPUs, 16 allowed", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ScaleUpAtomic(Snapshot{Nodes: tt.nodes, Limits: tt.limits}, tt.pool, tt.pods, tt.now)
			if r.Nodes != tt.want || r.OK != tt.ok || r.Retry != tt.retry || !strings.HasPrefix(r.Reason, tt.reason) || (tt.reason == "" && r.Reason != "") {
				t.Fatalf("ScaleUpAtomic = %+v, want (%d, %v, %q, retry %v)", r, tt.want, tt.ok, tt.reason, tt.retry)
			}
		})
	}
}

func TestCheckCapacity(t *testing.T) {
	t.Parallel()
	gpuNode := func(name string, pods ...*corev1.Pod) NodeInfo {
		return ready(mkNode(name, 96, 1024, 8, nodeTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule)), "gpu", pods...)
	}
	nodes := []NodeInfo{gpuNode("g1", mkPod("busy", 0, 0, 4)), gpuNode("g2"), {Node: mkNode("g3", 96, 1024, 8), Pool: "gpu"}}
	tests := []struct {
		name   string
		pods   []*corev1.Pod
		ok     bool
		reason string
	}{
		{"fits together", append(mkPods("a", 1, 1000, 1024, 8, tolerateGPU()), mkPods("b", 2, 1000, 1024, 2, tolerateGPU())...), true, ""},
		{"too many together", mkPods("a", 2, 1000, 1024, 8, tolerateGPU()), false,
			"pod default/a-1: 0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 node(s) were not ready."},
		{"taint", mkPods("a", 1, 1000, 1024, 1), false,
			"pod default/a-0: 0/3 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: present}, 1 node(s) were not ready."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, reason := CheckCapacity(Snapshot{Nodes: nodes}, tt.pods)
			if ok != tt.ok || reason != tt.reason {
				t.Fatalf("CheckCapacity = (%v, %q), want (%v, %q)", ok, reason, tt.ok, tt.reason)
			}
		})
	}
}

// TestBookedCapacity: pods of a provisioned ProvisioningRequest hold their
// room: pending pods do not take it, the node holding it is not scaled
// down, and a check-capacity request does not count it as free.
func TestBookedCapacity(t *testing.T) {
	t.Parallel()
	booked := func(n int) []*corev1.Pod {
		pods := mkPods("train", n, 1000, 1024, 8, tolerateGPU())
		for _, p := range pods {
			p.Annotations = map[string]string{provreqv1.AnnotationConsumeProvisioningRequest: "train"}
		}
		return pods
	}
	gpuNode := func(name string) NodeInfo {
		return ready(mkNode(name, 96, 1024, 8, nodeTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule), nodeLabels(corev1.LabelTopologyZone, "z1")), "gpu")
	}
	pools := []Pool{gpuPool("gpu", 8, 2, 4)}
	pools[0].ScaleDownUnneededTime = time.Minute
	for _, tt := range []struct {
		name    string
		booked  int
		wantUp  string
		wantFit int
	}{
		{"nothing booked: the pending pod fits a free node; both nodes are unneeded", 0, "", 1},
		{"one node booked: the pending pod takes the other; one node is unneeded", 1, "", 1},
		{"both booked: the pending pod needs a new node; none is unneeded", 2, "gpu+1", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := Snapshot{Nodes: []NodeInfo{gpuNode("g1"), gpuNode("g2")}, Booked: booked(tt.booked),
				Pending: mkPods("p", 1, 1000, 1024, 8, tolerateGPU())}
			up := ScaleUp(s, pools, Expander{}, t0)
			if increases(up) != tt.wantUp || len(up.Schedulable) != tt.wantFit {
				t.Fatalf("scale-up %q with %d schedulable, want %q with %d", increases(up), len(up.Schedulable), tt.wantUp, tt.wantFit)
			}
			s.Pending = nil
			since := map[string]time.Time{"g1": t0.Add(-time.Hour), "g2": t0.Add(-time.Hour)}
			down := ScaleDown(s, pools, since, t0)
			if len(down.Remove) != 2-tt.booked {
				t.Fatalf("removed %v, want %d (kept %v)", down.Remove, 2-tt.booked, down.Kept)
			}
			for _, n := range []string{"g1", "g2"}[:tt.booked] {
				if want := "capacity booked by ProvisioningRequest default/train"; down.Kept[n] != want {
					t.Errorf("%s kept for %q, want %q", n, down.Kept[n], want)
				}
			}
			if ok, why := CheckCapacity(s, mkPods("c", 2, 1000, 1024, 8, tolerateGPU())); ok != (tt.booked == 0) {
				t.Errorf("check-capacity of 2 nodes' worth: %v (%s)", ok, why)
			}
		})
	}
}
