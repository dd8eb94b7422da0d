package decide

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// benchCluster builds 1,000 nodes × 30 pods: 200 GPU nodes (8 GPUs, all
// allocated) in 4 zones and 800 CPU nodes; a tenth of the deployments use
// hostname anti-affinity. Pending: 500 one-GPU pods from 5 deployments, one
// of which spreads over hostnames and one uses anti-affinity.
func benchCluster() (Snapshot, []Pool) {
	var s Snapshot
	zones := []string{"z1", "z2", "z3", "z4"}
	owned := func(p *corev1.Pod, deploy string) {
		p.OwnerReferences[0].UID = types.UID("rs-" + deploy)
		p.Labels = map[string]string{"app": deploy}
	}
	for i := 0; i < 1000; i++ {
		zone := zones[i%len(zones)]
		var n *corev1.Node
		pool := "cpu"
		if i < 200 {
			pool = "h100x8"
			n = mkNode(fmt.Sprintf("gpu-%04d", i), 96, 1024, 8, nodeLabels(corev1.LabelTopologyZone, zone),
				nodeTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule))
		} else {
			n = mkNode(fmt.Sprintf("cpu-%04d", i), 32, 128, 0, nodeLabels(corev1.LabelTopologyZone, zone))
		}
		pods := make([]*corev1.Pod, 30)
		for j := range pods {
			deploy := fmt.Sprintf("d%d", (i*30+j)%300)
			var opts []podOpt
			if i < 200 && j < 8 {
				opts = append(opts, tolerateGPU())
			}
			if (i*30+j)%300 < 30 {
				opts = append(opts, podAntiAffinity(corev1.LabelHostname, "app", deploy))
			}
			gpus := int64(0)
			if i < 200 && j < 8 {
				gpus = 1
			}
			p := mkPod(fmt.Sprintf("%s-%d-%d", n.Name, i, j), 1000, 2048, gpus, opts...)
			owned(p, deploy)
			if p.Spec.Affinity != nil {
				// Re-target the anti-affinity at the pod's own deployment.
				p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchLabels = map[string]string{"app": deploy}
			}
			pods[j] = p
		}
		s.Nodes = append(s.Nodes, NodeInfo{Node: n, Pool: pool, Ready: true, Pods: pods})
	}
	for i := 0; i < 500; i++ {
		deploy := fmt.Sprintf("train-%d", i%5)
		opts := []podOpt{tolerateGPU()}
		switch i % 5 {
		case 0:
			opts = append(opts, spread(corev1.LabelHostname, 1, "app", deploy))
		case 1:
			opts = append(opts, podAntiAffinity(corev1.LabelHostname, "app", deploy))
		}
		p := mkPod(fmt.Sprintf("pending-%d", i), 4000, 16384, 1, opts...)
		owned(p, deploy)
		if i%5 == 0 {
			p.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels = map[string]string{"app": deploy}
		}
		if i%5 == 1 {
			p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchLabels = map[string]string{"app": deploy}
		}
		s.Pending = append(s.Pending, p)
	}
	pools := []Pool{
		{Name: "cpu", Template: mkNode("t-cpu", 32, 128, 0, nodeLabels(corev1.LabelTopologyZone, "z1")), Current: 800, MaxSize: 2000, PricePerHour: 1},
		withPrice(gpuPool("h100x8", 8, 200, 400), 30),
		withPrice(gpuPool("a100x1", 1, 0, 50), 4),
		withPrice(gpuPool("l4x1", 1, 0, 1000), 1),
	}
	return s, pools
}

func BenchmarkScaleUp1000Nodes30000Pods(b *testing.B) {
	s, pools := benchCluster()
	b.ReportAllocs()
	b.ResetTimer()
	var plan ScaleUpPlan
	for i := 0; i < b.N; i++ {
		plan = ScaleUp(s, pools, Expander{}, t0)
	}
	b.StopTimer()
	var helped int
	for _, inc := range plan.Increases {
		helped += len(inc.Pods)
	}
	if helped+len(plan.Schedulable)+len(plan.NotTriggerScaleUp) != 500 {
		b.Fatalf("pods unaccounted: %d helped, %d schedulable, %d not triggered", helped, len(plan.Schedulable), len(plan.NotTriggerScaleUp))
	}
	b.ReportMetric(float64(helped), "pods-helped")
}

// TestBenchClusterPlan checks the benchmark's plan is meaningful.
func TestBenchClusterPlan(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("large")
	}
	s, pools := benchCluster()
	plan := ScaleUp(s, pools, Expander{}, t0)
	total := 0
	for _, inc := range plan.Increases {
		total += len(inc.Pods)
		t.Logf("%s +%d for %d pods", inc.Pool, inc.Delta, len(inc.Pods))
	}
	if total != 500 || len(plan.Schedulable) != 0 {
		t.Fatalf("helped %d, schedulable %d, not triggered %d", total, len(plan.Schedulable), len(plan.NotTriggerScaleUp))
	}
}

func BenchmarkScaleDown1000Nodes30000Pods(b *testing.B) {
	s, pools := benchCluster()
	s.Pending = nil
	now := time.Unix(1_700_000_000, 0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ScaleDown(s, pools, map[string]time.Time{}, now)
	}
}

// BenchmarkScaleUp1000Nodes30000PodsMemo is the autoscaler's steady state:
// the same cluster pass after pass, with the bound pods parsed once.
func BenchmarkScaleUp1000Nodes30000PodsMemo(b *testing.B) {
	s, pools := benchCluster()
	withUIDs(&s)
	s.Memo = NewMemo()
	ScaleUp(s, pools, Expander{}, t0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ScaleUp(s, pools, Expander{}, t0)
	}
}

func BenchmarkScaleDown1000Nodes30000PodsMemo(b *testing.B) {
	s, pools := benchCluster()
	withUIDs(&s)
	s.Pending = nil
	s.Memo = NewMemo()
	now := time.Unix(1_700_000_000, 0)
	ScaleDown(s, pools, map[string]time.Time{}, now)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ScaleDown(s, pools, map[string]time.Time{}, now)
	}
}

// withUIDs gives every bound pod a UID and resourceVersion, as the API does.
func withUIDs(s *Snapshot) {
	for _, ni := range s.Nodes {
		ni.Node.ResourceVersion = "1"
		for _, p := range ni.Pods {
			p.UID = types.UID("uid-" + p.Name)
			p.ResourceVersion = "1"
		}
	}
}

// fleetCluster is the shape of the fleet benchmark in bench/: 1,000 8-GPU
// nodes of a fixed pool running 30 small CPU pods each, and 500 pending
// 8-GPU pods that only the autoscaled pool "burst" can take, half of which
// its 250 upcoming machines already cover.
func fleetCluster() (Snapshot, []Pool) {
	var s Snapshot
	const poolLabel = "fke.dev/nodepool"
	for i := 0; i < 1000; i++ {
		n := mkNode(fmt.Sprintf("fleet-%04d", i), 96, 1024, 8, nodeLabels(poolLabel, "fleet"),
			nodeTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule))
		pods := make([]*corev1.Pod, 30)
		for j := range pods {
			p := mkPod(fmt.Sprintf("web-%d-%d", i, j), 100, 128, 0, tolerateGPU(), nodeSelector(poolLabel, "fleet"))
			p.OwnerReferences[0].UID = types.UID(fmt.Sprintf("rs-web-%d", (i*30+j)%30))
			pods[j] = p
		}
		s.Nodes = append(s.Nodes, NodeInfo{Node: n, Ready: true, Pods: pods})
	}
	for i := 0; i < 500; i++ {
		p := mkPod(fmt.Sprintf("burst-%d", i), 1000, 1024, 8, tolerateGPU(), nodeSelector(poolLabel, "burst"))
		p.OwnerReferences[0].UID = "rs-burst"
		s.Pending = append(s.Pending, p)
	}
	burst := gpuPool("burst", 8, 0, 600)
	burst.Template.Labels[poolLabel] = "burst"
	burst.Upcoming = 250
	return s, []Pool{burst}
}

// BenchmarkScaleUpFleetBurst is one autoscaler pass during the fleet
// benchmark's burst, in steady state (memo warm).
func BenchmarkScaleUpFleetBurst(b *testing.B) {
	s, pools := fleetCluster()
	withUIDs(&s)
	s.Memo = NewMemo()
	plan := ScaleUp(s, pools, Expander{}, t0)
	if len(plan.Schedulable) != 250 || increases(plan) != "burst+250" {
		b.Fatalf("plan: %d schedulable, increases %s", len(plan.Schedulable), increases(plan))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ScaleUp(s, pools, Expander{}, t0)
	}
}

// BenchmarkScaleDownFleetIdle is the scale-down half of an idle pass in the
// fleet benchmark's shape: 1,000 nodes of a pool that is not autoscaled.
func BenchmarkScaleDownFleetIdle(b *testing.B) {
	s, pools := fleetCluster()
	withUIDs(&s)
	s.Pending = nil
	pools[0].Upcoming = 0
	s.Memo = NewMemo()
	ScaleDown(s, pools, nil, t0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ScaleDown(s, pools, nil, t0)
	}
}
