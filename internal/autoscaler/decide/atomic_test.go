package decide

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestScaleUpAtomic(t *testing.T) {
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
	}{
		{"gang fits in 4 new nodes", gpuPool("gpu", 8, 0, 4), mkPods("w", 8, 1000, 1024, 4, tolerateGPU()), nil, Limits{}, t0, 4, true, ""},
		{"max size: need 4, 3 allowed", gpuPool("gpu", 8, 1, 4), mkPods("w", 8, 1000, 1024, 4, tolerateGPU()), nil, Limits{}, t0, 4, false,
			"max size of pool gpu reached: need 4, 3 allowed"},
		{"upcoming counts against max size", withUpcoming(gpuPool("gpu", 8, 0, 4), 2), mkPods("w", 4, 1000, 1024, 8, tolerateGPU()), nil, Limits{}, t0, 4, false,
			"max size of pool gpu reached: need 4, 2 allowed"},
		{"existing free capacity is not used", gpuPool("gpu", 8, 1, 4), mkPods("w", 1, 1000, 1024, 8, tolerateGPU()),
			[]NodeInfo{ready(gpuPool("gpu", 8, 0, 0).Template, "gpu")}, Limits{}, t0, 1, true, ""},
		{"a pod that fits no node of the pool", gpuPool("gpu", 8, 0, 4), append(mkPods("w", 2, 1000, 1024, 8, tolerateGPU()), mkPod("huge", 1000, 1024, 16, tolerateGPU())), nil, Limits{}, t0, 0, false,
			"pod default/huge didn't fit pool gpu: Insufficient nvidia.com/gpu"},
		{"cluster GPU limit", gpuPool("gpu", 8, 1, 10), mkPods("w", 2, 1000, 1024, 8, tolerateGPU()), nil, Limits{MaxGPUs: 16}, t0, 2, false,
			"max cluster GPUs limit reached: need 16 GPUs, 8 allowed"},
		{"cluster node limit", gpuPool("gpu", 8, 1, 10), mkPods("w", 2, 1000, 1024, 8, tolerateGPU()), nil, Limits{MaxNodes: 2}, t0, 2, false,
			"max cluster nodes limit reached: need 2 nodes, 1 allowed"},
		{"backing off", withBackoff(gpuPool("gpu", 8, 0, 4), t0.Add(time.Minute)), mkPods("w", 1, 1000, 1024, 8, tolerateGPU()), nil, Limits{}, t0, 0, false,
			"pool gpu backing off"},
		{"anti-affinity gang: one per node", gpuPool("gpu", 8, 0, 4), mkPods("w", 3, 1000, 1024, 1, tolerateGPU(), podAntiAffinity(corev1.LabelHostname, "app", "web")),
			nil, Limits{}, t0, 3, true, ""},
		{"no pods", gpuPool("gpu", 8, 0, 4), nil, nil, Limits{}, t0, 0, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, ok, reason := ScaleUpAtomic(Snapshot{Nodes: tt.nodes, Limits: tt.limits}, tt.pool, tt.pods, tt.now)
			if n != tt.want || ok != tt.ok || !strings.HasPrefix(reason, tt.reason) || (tt.reason == "" && reason != "") {
				t.Fatalf("ScaleUpAtomic = (%d, %v, %q), want (%d, %v, %q)", n, ok, reason, tt.want, tt.ok, tt.reason)
			}
		})
	}
}

func TestCheckCapacity(t *testing.T) {
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
