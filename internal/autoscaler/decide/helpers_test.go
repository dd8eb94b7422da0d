package decide

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const gpuRes corev1.ResourceName = "nvidia.com/gpu"

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type nodeOpt func(*corev1.Node)

// mkNode builds a node with cpu (cores), memory (Gi), GPUs and 110 pods.
func mkNode(name string, cpu, memGi, gpus int64, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(cpu, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(memGi<<30, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		}},
	}
	if gpus > 0 {
		n.Status.Allocatable[gpuRes] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func nodeLabels(kv ...string) nodeOpt {
	return func(n *corev1.Node) {
		for i := 0; i+1 < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
	}
}

func nodeTaint(key, value string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	}
}

func nodeAlloc(name corev1.ResourceName, q string) nodeOpt {
	return func(n *corev1.Node) { n.Status.Allocatable[name] = resource.MustParse(q) }
}

func nodeAnnotation(k, v string) nodeOpt {
	return func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[k] = v
	}
}

type podOpt func(*corev1.Pod)

// mkPod builds a ReplicaSet-owned pod in "default" requesting cpu
// (millicores), memory (Mi) and GPUs.
func mkPod(name string, milliCPU, memMi, gpus int64, opts ...podOpt) *corev1.Pod {
	ctrl := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			Labels:          map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: &ctrl}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}}},
	}
	req := p.Spec.Containers[0].Resources.Requests
	if milliCPU > 0 {
		req[corev1.ResourceCPU] = *resource.NewMilliQuantity(milliCPU, resource.DecimalSI)
	}
	if memMi > 0 {
		req[corev1.ResourceMemory] = *resource.NewQuantity(memMi<<20, resource.BinarySI)
	}
	if gpus > 0 {
		req[gpuRes] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func podLabels(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func podNS(ns string) podOpt { return func(p *corev1.Pod) { p.Namespace = ns } }

func podOwner(kind, uid string) podOpt {
	return func(p *corev1.Pod) { p.OwnerReferences[0].Kind = kind; p.OwnerReferences[0].UID = types.UID(uid) }
}

func bare() podOpt { return func(p *corev1.Pod) { p.OwnerReferences = nil } }

func podAnnotation(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func podRequest(name corev1.ResourceName, q string) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests[name] = resource.MustParse(q) }
}

func tolerate(key string, op corev1.TolerationOperator, value string, effect corev1.TaintEffect) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: op, Value: value, Effect: effect})
	}
}

func tolerateGPU() podOpt { return tolerate("nvidia.com/gpu", corev1.TolerationOpExists, "", "") }

func nodeSelector(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

func nodeAffinity(terms ...corev1.NodeSelectorTerm) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}
	}
}

func expr(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func podAntiAffinity(topologyKey string, kv ...string) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: pairs(kv...)}, TopologyKey: topologyKey,
		}}}
	}
}

func podAffinity(topologyKey string, kv ...string) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: pairs(kv...)}, TopologyKey: topologyKey,
		}}}
	}
}

func spread(topologyKey string, maxSkew int32, kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: maxSkew, TopologyKey: topologyKey, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: pairs(kv...)},
		})
	}
}

func pairs(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func ready(n *corev1.Node, pool string, pods ...*corev1.Pod) NodeInfo {
	return NodeInfo{Node: n, Pool: pool, Ready: true, Pods: pods}
}

func mkPods(prefix string, count int, milliCPU, memMi, gpus int64, opts ...podOpt) []*corev1.Pod {
	out := make([]*corev1.Pod, count)
	for i := range out {
		out[i] = mkPod(fmt.Sprintf("%s-%d", prefix, i), milliCPU, memMi, gpus, opts...)
	}
	return out
}

// gpuPool is a pool of 8-GPU nodes tainted nvidia.com/gpu=present.
func gpuPool(name string, gpus int64, current, max int) Pool {
	return Pool{
		Name:         name,
		Template:     mkNode("tmpl-"+name, 96, 1024, gpus, nodeTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule), nodeLabels(corev1.LabelTopologyZone, "z1")),
		MaxSize:      max,
		Current:      current,
		PricePerHour: 4 * float64(gpus),
	}
}

func cpuPool(name string, current, max int) Pool {
	return Pool{
		Name:         name,
		Template:     mkNode("tmpl-"+name, 8, 32, 0, nodeLabels(corev1.LabelTopologyZone, "z1")),
		MaxSize:      max,
		Current:      current,
		PricePerHour: 0.4,
	}
}

// increases renders a plan's increases as "pool+N" sorted.
func increases(p ScaleUpPlan) string {
	var parts []string
	for _, inc := range p.Increases {
		parts = append(parts, fmt.Sprintf("%s+%d", inc.Pool, inc.Delta))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func reasonsOf(p ScaleUpPlan) map[string]string {
	m := map[string]string{}
	for _, r := range p.NotTriggerScaleUp {
		m[r.Pod.Name] = r.Reason
	}
	return m
}
