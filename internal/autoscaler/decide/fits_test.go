package decide

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFits(t *testing.T) {
	t.Parallel()
	gpuNode := func(opts ...nodeOpt) *corev1.Node {
		return mkNode("n1", 8, 32, 8, append([]nodeOpt{nodeTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule),
			nodeLabels(corev1.LabelTopologyZone, "z1", "nvidia.com/gpu.product", "H100", "gpu.count", "8")}, opts...)...)
	}
	plain := mkNode("n1", 4, 16, 0, nodeLabels(corev1.LabelTopologyZone, "z1"))
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name   string
		pod    *corev1.Pod
		node   *corev1.Node
		onNode []*corev1.Pod
		want   string // "" fits
	}{
		{"fits", mkPod("p", 1000, 1024, 0), plain, nil, ""},
		{"insufficient cpu", mkPod("p", 5000, 0, 0), plain, nil, "Insufficient cpu"},
		{"insufficient cpu counting pods on node", mkPod("p", 2000, 0, 0), plain, []*corev1.Pod{mkPod("o", 3000, 0, 0)}, "Insufficient cpu"},
		{"insufficient memory", mkPod("p", 0, 17*1024, 0), plain, nil, "Insufficient memory"},
		{"insufficient cpu and memory", mkPod("p", 5000, 17*1024, 0), plain, nil, "Insufficient cpu, Insufficient memory"},
		{"insufficient ephemeral-storage", mkPod("p", 0, 0, 0, podRequest(corev1.ResourceEphemeralStorage, "1Gi")), plain, nil, "Insufficient ephemeral-storage"},
		{"too many pods", mkPod("p", 0, 0, 0), mkNode("n1", 4, 16, 0, nodeAlloc(corev1.ResourcePods, "1")), []*corev1.Pod{mkPod("o", 0, 0, 0)}, "Too many pods"},
		{"gpu fits", mkPod("p", 1000, 0, 8, tolerateGPU()), gpuNode(), nil, ""},
		{"insufficient gpu", mkPod("p", 1000, 0, 4, tolerateGPU()), gpuNode(), []*corev1.Pod{mkPod("o", 0, 0, 5)}, "Insufficient nvidia.com/gpu"},
		{"gpu on node without gpus", mkPod("p", 0, 0, 1), plain, nil, "Insufficient nvidia.com/gpu"},
		{"gpu via limits only", mkPod("p", 0, 0, 0, func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpuRes: resource.MustParse("1")}
		}), plain, nil, "Insufficient nvidia.com/gpu"},
		{"mig fits", mkPod("p", 0, 0, 0, podRequest("nvidia.com/mig-1g.10gb", "2")), mkNode("n1", 4, 16, 0, nodeAlloc("nvidia.com/mig-1g.10gb", "7")), nil, ""},
		{"mig insufficient", mkPod("p", 0, 0, 0, podRequest("nvidia.com/mig-1g.10gb", "2")), mkNode("n1", 4, 16, 0, nodeAlloc("nvidia.com/mig-1g.10gb", "7")),
			[]*corev1.Pod{mkPod("o", 0, 0, 0, podRequest("nvidia.com/mig-1g.10gb", "6"))}, "Insufficient nvidia.com/mig-1g.10gb"},
		{"init container dominates", mkPod("p", 1000, 0, 0, func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5")}}}}
		}), plain, nil, "Insufficient cpu"},
		{"sidecar adds to containers", mkPod("p", 3000, 0, 0, func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "s", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")}}}}
		}), plain, nil, "Insufficient cpu"},
		{"overhead counts", mkPod("p", 3900, 0, 0, func(p *corev1.Pod) {
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}
		}), plain, nil, "Insufficient cpu"},
		{"untolerated taint", mkPod("p", 0, 0, 1), gpuNode(), nil, "node(s) had untolerated taint {nvidia.com/gpu: present}"},
		{"tolerated by Equal", mkPod("p", 0, 0, 1, tolerate("nvidia.com/gpu", corev1.TolerationOpEqual, "present", corev1.TaintEffectNoSchedule)), gpuNode(), nil, ""},
		{"toleration for another effect", mkPod("p", 0, 0, 1, tolerate("nvidia.com/gpu", corev1.TolerationOpExists, "", corev1.TaintEffectNoExecute)), gpuNode(), nil,
			"node(s) had untolerated taint {nvidia.com/gpu: present}"},
		{"wildcard toleration", mkPod("p", 0, 0, 1, tolerate("", corev1.TolerationOpExists, "", "")), gpuNode(), nil, ""},
		{"NoExecute taint untolerated", mkPod("p", 0, 0, 0), mkNode("n1", 4, 16, 0, nodeTaint("dedicated", "infra", corev1.TaintEffectNoExecute)), nil,
			"node(s) had untolerated taint {dedicated: infra}"},
		{"PreferNoSchedule ignored", mkPod("p", 0, 0, 0), mkNode("n1", 4, 16, 0, nodeTaint("dedicated", "infra", corev1.TaintEffectPreferNoSchedule)), nil, ""},
		{"Gt toleration", mkPod("p", 0, 0, 0, tolerate("risk", corev1.TolerationOpGt, "3", corev1.TaintEffectNoSchedule)), mkNode("n1", 4, 16, 0, nodeTaint("risk", "5", corev1.TaintEffectNoSchedule)), nil, ""},
		{"unschedulable node", mkPod("p", 0, 0, 0), mkNode("n1", 4, 16, 0, func(n *corev1.Node) { n.Spec.Unschedulable = true }), nil, "node(s) were unschedulable"},
		{"unschedulable tolerated", mkPod("p", 0, 0, 0, tolerate(corev1.TaintNodeUnschedulable, corev1.TolerationOpExists, "", corev1.TaintEffectNoSchedule)),
			mkNode("n1", 4, 16, 0, func(n *corev1.Node) { n.Spec.Unschedulable = true }), nil, ""},
		{"node name mismatch", mkPod("p", 0, 0, 0, func(p *corev1.Pod) { p.Spec.NodeName = "other" }), plain, nil, "node(s) didn't match the requested node name"},
		{"nodeSelector matches", mkPod("p", 0, 0, 1, tolerateGPU(), nodeSelector("nvidia.com/gpu.product", "H100")), gpuNode(), nil, ""},
		{"nodeSelector mismatch", mkPod("p", 0, 0, 1, tolerateGPU(), nodeSelector("nvidia.com/gpu.product", "A100")), gpuNode(), nil, "node(s) didn't match Pod's node affinity/selector"},
		{"affinity In", mkPod("p", 0, 0, 0, nodeAffinity(expr(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "z0", "z1"))), plain, nil, ""},
		{"affinity In mismatch", mkPod("p", 0, 0, 0, nodeAffinity(expr(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "z2"))), plain, nil, "node(s) didn't match Pod's node affinity/selector"},
		{"affinity NotIn", mkPod("p", 0, 0, 0, nodeAffinity(expr(corev1.LabelTopologyZone, corev1.NodeSelectorOpNotIn, "z1"))), plain, nil, "node(s) didn't match Pod's node affinity/selector"},
		{"affinity NotIn absent label", mkPod("p", 0, 0, 0, nodeAffinity(expr("pool", corev1.NodeSelectorOpNotIn, "x"))), plain, nil, ""},
		{"affinity Exists", mkPod("p", 0, 0, 0, nodeAffinity(expr(corev1.LabelTopologyZone, corev1.NodeSelectorOpExists))), plain, nil, ""},
		{"affinity DoesNotExist", mkPod("p", 0, 0, 0, nodeAffinity(expr(corev1.LabelTopologyZone, corev1.NodeSelectorOpDoesNotExist))), plain, nil, "node(s) didn't match Pod's node affinity/selector"},
		{"affinity Gt", mkPod("p", 0, 0, 1, tolerateGPU(), nodeAffinity(expr("gpu.count", corev1.NodeSelectorOpGt, "4"))), gpuNode(), nil, ""},
		{"affinity Gt fails", mkPod("p", 0, 0, 1, tolerateGPU(), nodeAffinity(expr("gpu.count", corev1.NodeSelectorOpGt, "8"))), gpuNode(), nil, "node(s) didn't match Pod's node affinity/selector"},
		{"affinity Lt", mkPod("p", 0, 0, 1, tolerateGPU(), nodeAffinity(expr("gpu.count", corev1.NodeSelectorOpLt, "9"))), gpuNode(), nil, ""},
		{"affinity terms are ORed", mkPod("p", 0, 0, 0, nodeAffinity(expr(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "z2"), expr(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "z1"))), plain, nil, ""},
		{"matchFields metadata.name", mkPod("p", 0, 0, 0, nodeAffinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}})), plain, nil, ""},
		{"matchFields mismatch", mkPod("p", 0, 0, 0, nodeAffinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n2"}}}})), plain, nil, "node(s) didn't match Pod's node affinity/selector"},
		{"anti-affinity hostname", mkPod("p", 0, 0, 0, podAntiAffinity(corev1.LabelHostname, "app", "web")), plain, []*corev1.Pod{mkPod("o", 0, 0, 0)}, "node(s) didn't match pod anti-affinity rules"},
		{"anti-affinity zone", mkPod("p", 0, 0, 0, podAntiAffinity(corev1.LabelTopologyZone, "app", "web")), plain, []*corev1.Pod{mkPod("o", 0, 0, 0)}, "node(s) didn't match pod anti-affinity rules"},
		{"anti-affinity other namespace", mkPod("p", 0, 0, 0, podAntiAffinity(corev1.LabelHostname, "app", "web")), plain, []*corev1.Pod{mkPod("o", 0, 0, 0, podNS("other"))}, ""},
		{"existing pod's anti-affinity", mkPod("p", 0, 0, 0), plain, []*corev1.Pod{mkPod("o", 0, 0, 0, podLabels("app", "db"), podAntiAffinity(corev1.LabelHostname, "app", "web"))},
			"node(s) didn't satisfy existing pods anti-affinity rules"},
		{"pod affinity satisfied", mkPod("p", 0, 0, 0, podAffinity(corev1.LabelHostname, "app", "db")), plain, []*corev1.Pod{mkPod("o", 0, 0, 0, podLabels("app", "db"))}, ""},
		{"pod affinity first of its group", mkPod("p", 0, 0, 0, podAffinity(corev1.LabelHostname, "app", "web")), plain, nil, ""},
		{"pod affinity unsatisfied", mkPod("p", 0, 0, 0, podAffinity(corev1.LabelHostname, "app", "db")), plain, nil, "node(s) didn't match pod affinity rules"},
		{"spread missing label", mkPod("p", 0, 0, 0, spread("rack", 1, "app", "web")), plain, nil, "node(s) didn't match pod topology spread constraints (missing required label)"},
		{"spread single node", mkPod("p", 0, 0, 0, spread(corev1.LabelHostname, 1, "app", "web")), plain, []*corev1.Pod{mkPod("o", 0, 0, 0)}, ""},
		{"host port conflict", mkPod("p", 0, 0, 0, hostPortOpt(8080)), plain, []*corev1.Pod{mkPod("o", 0, 0, 0, hostPortOpt(8080))}, "node(s) didn't have free ports for the requested pod ports"},
		{"host port free", mkPod("p", 0, 0, 0, hostPortOpt(8080)), plain, []*corev1.Pod{mkPod("o", 0, 0, 0, hostPortOpt(8081))}, ""},
		{"invalid selector", mkPod("p", 0, 0, 0, func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}, TopologyKey: corev1.LabelHostname}}}}
		}), plain, nil, "invalid pod affinity label selector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, reason := Fits(tt.pod, tt.node, tt.onNode)
			if tt.want == "" {
				if !ok {
					t.Fatalf("Fits = false (%s), want true", reason)
				}
				return
			}
			if ok {
				t.Fatalf("Fits = true, want %q", tt.want)
			}
			if !strings.HasPrefix(reason, tt.want) {
				t.Fatalf("reason = %q, want %q", reason, tt.want)
			}
		})
	}
}

func hostPortOpt(port int32) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: port, HostPort: port}}
	}
}

// clusterCheck runs the predicate for pod against node target inside a
// cluster of several nodes (scan mode, as scale-down uses it).
func clusterCheck(pod *corev1.Pod, nodes []NodeInfo, target string) string {
	w := newWorld(nil, false, nil)
	var tn *simNode
	for i := range nodes {
		n := w.addSnapshotNode(&nodes[i])
		if n.name == target {
			tn = n
		}
	}
	return strings.Join(w.check(newPodInfo(pod), tn, nil), ", ")
}

func TestClusterFilters(t *testing.T) {
	t.Parallel()
	zoneNode := func(name, zone string) *corev1.Node {
		return mkNode(name, 8, 32, 0, nodeLabels(corev1.LabelTopologyZone, zone))
	}
	web := func(n string, opts ...podOpt) *corev1.Pod { return mkPod(n, 100, 0, 0, opts...) }
	cluster := []NodeInfo{
		ready(zoneNode("a1", "a"), "", web("w1"), web("w2")),
		ready(zoneNode("a2", "a"), ""),
		ready(zoneNode("b1", "b"), "", mkPod("db", 100, 0, 0, podLabels("app", "db"))),
		ready(mkNode("c1", 8, 32, 0, nodeLabels(corev1.LabelTopologyZone, "c", "special", "yes")), ""),
	}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		target string
		want   string
	}{
		{"hostname spread: loaded node rejected", web("p", spread(corev1.LabelHostname, 1, "app", "web")), "a1", reasonSpread},
		{"hostname spread: empty node accepted", web("p", spread(corev1.LabelHostname, 1, "app", "web")), "a2", ""},
		{"hostname spread: maxSkew 2 allows", web("p", spread(corev1.LabelHostname, 2, "app", "web")), "a1", reasonSpread},
		{"hostname spread: maxSkew 3 allows", web("p", spread(corev1.LabelHostname, 3, "app", "web")), "a1", ""},
		{"zone spread: zone a rejected", web("p", spread(corev1.LabelTopologyZone, 1, "app", "web")), "a2", reasonSpread},
		{"zone spread: zone b accepted", web("p", spread(corev1.LabelTopologyZone, 1, "app", "web")), "b1", ""},
		// Only nodes passing the pod's node affinity count as domains: with
		// zones b and c excluded, zone a is the only domain.
		{"zone spread honours node affinity", web("p", spread(corev1.LabelTopologyZone, 1, "app", "web"),
			nodeAffinity(expr(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "a"))), "a2", ""},
		{"zone anti-affinity", web("p", podAntiAffinity(corev1.LabelTopologyZone, "app", "web")), "a2", reasonAnti},
		{"zone anti-affinity other zone", web("p", podAntiAffinity(corev1.LabelTopologyZone, "app", "web")), "b1", ""},
		{"hostname anti-affinity other node", web("p", podAntiAffinity(corev1.LabelHostname, "app", "web")), "a2", ""},
		{"affinity hostname satisfied", web("p", podAffinity(corev1.LabelHostname, "app", "db")), "b1", ""},
		{"affinity hostname elsewhere", web("p", podAffinity(corev1.LabelHostname, "app", "db")), "a2", reasonAffinity},
		{"affinity zone", web("p", podAffinity(corev1.LabelTopologyZone, "app", "web")), "a2", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := clusterCheck(tt.pod, cluster, tt.target); got != tt.want {
				t.Fatalf("reason = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestResourceRequests(t *testing.T) {
	t.Parallel()
	always := corev1.ContainerRestartPolicyAlways
	cpu := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string // cpu
	}{
		{"containers summed", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: cpu("1")}, {Resources: cpu("500m")}}}}, "1500m"},
		{"init max wins", &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Resources: cpu("2")}}, Containers: []corev1.Container{{Resources: cpu("1")}}}}, "2"},
		{"sidecar before init adds to it", &corev1.Pod{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{RestartPolicy: &always, Resources: cpu("500m")}, {Resources: cpu("2")}},
			Containers:     []corev1.Container{{Resources: cpu("1")}}}}, "2500m"},
		{"sidecar after init", &corev1.Pod{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Resources: cpu("2")}, {RestartPolicy: &always, Resources: cpu("500m")}},
			Containers:     []corev1.Container{{Resources: cpu("1")}}}}, "2"},
		{"overhead added", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: cpu("1")}},
			Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}}, "1250m"},
		{"pod-level request replaces", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: cpu("1")}},
			Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}, "3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ResourceRequests(tt.pod)
			want := resource.MustParse(tt.want)
			if q := got[corev1.ResourceCPU]; q.Cmp(want) != 0 {
				t.Fatalf("cpu = %s, want %s", q.String(), tt.want)
			}
		})
	}
	gpu := ResourceRequests(mkPod("p", 0, 0, 0, func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpuRes: resource.MustParse("2")}
	}))
	if q := gpu[gpuRes]; q.Value() != 2 {
		t.Fatalf("limit-only gpu request = %s, want 2", q.String())
	}
	if len(ResourceRequests(nil)) != 0 {
		t.Fatal("nil pod should request nothing")
	}
}
