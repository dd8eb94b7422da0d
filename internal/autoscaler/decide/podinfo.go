package decide

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

const labelNamespaceName = "kubernetes.io/metadata.name"

// podInfo is a pod parsed once for simulation: its effective request and its
// compiled scheduling constraints. A placed copy carries the node it is on.
type podInfo struct {
	pod         *corev1.Pod
	req         resources // includes pods: 1
	scalarNames []corev1.ResourceName
	gpu         int64 // sum of GPU resources requested
	affinity    []affinityTerm
	anti        []affinityTerm
	spread      []spreadConstraint
	spreadKeys  []string
	hostPorts   []hostPort
	// invalid is set when a selector of the pod cannot be parsed; such a
	// pod fits nowhere, with this reason.
	invalid string

	// groupKey is set on bound pods: see groupKeyOf.
	groupKey string

	node *simNode    // set on placed copies
	base *topoCounts // scale-up: counts over the snapshot's own pods
}

type affinityTerm struct {
	selector    labels.Selector
	namespaces  map[string]bool
	nsSelector  labels.Selector // nil: only namespaces
	topologyKey string
}

type spreadConstraint struct {
	maxSkew       int32
	minDomains    int32
	topologyKey   string
	selector      labels.Selector
	honorAffinity bool
	honorTaints   bool
}

type hostPort struct {
	protocol corev1.Protocol
	ip       string
	port     int32
}

func (p *podInfo) hasTopology() bool {
	return len(p.affinity) > 0 || len(p.anti) > 0 || len(p.spread) > 0
}

func (p *podInfo) key() string {
	return p.pod.Namespace + "/" + p.pod.Name
}

func newPodInfo(pod *corev1.Pod) *podInfo {
	pi := &podInfo{pod: pod, req: podRequests(pod)}
	pi.req.pods = 1
	pi.scalarNames = sortedScalarNames(pi.req)
	pi.gpu = pi.req.gpuTotal()
	if a := pod.Spec.Affinity; a != nil && a.PodAffinity != nil {
		for i := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			t, err := compileAffinityTerm(pod, &a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[i])
			if err != nil {
				pi.invalid = err.Error()
			}
			pi.affinity = append(pi.affinity, t)
		}
	}
	if a := pod.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		for i := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			t, err := compileAffinityTerm(pod, &a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[i])
			if err != nil {
				pi.invalid = err.Error()
			}
			pi.anti = append(pi.anti, t)
		}
	}
	for i := range pod.Spec.TopologySpreadConstraints {
		c := &pod.Spec.TopologySpreadConstraints[i]
		if c.WhenUnsatisfiable != corev1.DoNotSchedule {
			continue
		}
		sc, err := compileSpread(pod, c)
		if err != nil {
			pi.invalid = err.Error()
		}
		pi.spread = append(pi.spread, sc)
		if !containsString(pi.spreadKeys, sc.topologyKey) {
			pi.spreadKeys = append(pi.spreadKeys, sc.topologyKey)
		}
	}
	pi.hostPorts = hostPortsOf(pod)
	return pi
}

func hostPortsOf(pod *corev1.Pod) []hostPort {
	var out []hostPort
	for i := range pod.Spec.Containers {
		for _, p := range pod.Spec.Containers[i].Ports {
			if p.HostPort > 0 {
				proto := p.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				out = append(out, hostPort{protocol: proto, ip: p.HostIP, port: p.HostPort})
			}
		}
	}
	return out
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// withLabelKeys adds matchLabelKeys (key in the pod's value) and
// mismatchLabelKeys (key not in it) to a selector, as the API server merges
// them for pods; pod templates may still carry them unmerged.
func withLabelKeys(sel labels.Selector, pod *corev1.Pod, match, mismatch []string) labels.Selector {
	add := func(keys []string, op selection.Operator) {
		for _, k := range keys {
			v, ok := pod.Labels[k]
			if !ok {
				continue
			}
			if r, err := labels.NewRequirement(k, op, []string{v}); err == nil {
				sel = sel.Add(*r)
			}
		}
	}
	add(match, selection.In)
	add(mismatch, selection.NotIn)
	return sel
}

func compileAffinityTerm(pod *corev1.Pod, t *corev1.PodAffinityTerm) (affinityTerm, error) {
	at := affinityTerm{topologyKey: t.TopologyKey, selector: labels.Nothing()}
	sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
	if err != nil {
		return at, fmt.Errorf("invalid pod affinity label selector: %v", err)
	}
	at.selector = withLabelKeys(sel, pod, t.MatchLabelKeys, t.MismatchLabelKeys)
	at.namespaces = make(map[string]bool, len(t.Namespaces)+1)
	for _, ns := range t.Namespaces {
		at.namespaces[ns] = true
	}
	if t.NamespaceSelector != nil {
		nsSel, err := metav1.LabelSelectorAsSelector(t.NamespaceSelector)
		if err != nil {
			return at, fmt.Errorf("invalid pod affinity namespace selector: %v", err)
		}
		at.nsSelector = nsSel
	} else if len(t.Namespaces) == 0 {
		at.namespaces[pod.Namespace] = true
	}
	return at, nil
}

func compileSpread(pod *corev1.Pod, c *corev1.TopologySpreadConstraint) (spreadConstraint, error) {
	sc := spreadConstraint{
		maxSkew:       c.MaxSkew,
		topologyKey:   c.TopologyKey,
		selector:      labels.Nothing(),
		honorAffinity: c.NodeAffinityPolicy == nil || *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor,
		honorTaints:   c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor,
	}
	if c.MinDomains != nil {
		sc.minDomains = *c.MinDomains
	}
	sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
	if err != nil {
		return sc, fmt.Errorf("invalid topology spread label selector: %v", err)
	}
	sc.selector = withLabelKeys(sel, pod, c.MatchLabelKeys, nil)
	return sc, nil
}

// matches reports whether pod p is selected by the term.
func (t *affinityTerm) matches(p *corev1.Pod, nsLabels map[string]map[string]string) bool {
	if !t.namespaces[p.Namespace] {
		if t.nsSelector == nil {
			return false
		}
		if !t.nsSelector.Matches(namespaceLabels(p.Namespace, nsLabels)) {
			return false
		}
	}
	return t.selector.Matches(labels.Set(p.Labels))
}

func namespaceLabels(ns string, nsLabels map[string]map[string]string) labels.Set {
	if l, ok := nsLabels[ns]; ok {
		if _, has := l[labelNamespaceName]; has {
			return labels.Set(l)
		}
		m := make(labels.Set, len(l)+1)
		for k, v := range l {
			m[k] = v
		}
		m[labelNamespaceName] = ns
		return m
	}
	return labels.Set{labelNamespaceName: ns}
}

// spreadMatches reports whether pod other counts for constraint c of pod p:
// same namespace, selected, not terminating.
func (c *spreadConstraint) matches(p, other *corev1.Pod) bool {
	return other.Namespace == p.Namespace && other.DeletionTimestamp == nil && c.selector.Matches(labels.Set(other.Labels))
}

// Pod classification used by scale-down.

func isDaemonSetPod(p *corev1.Pod) bool {
	c := metav1.GetControllerOf(p)
	return c != nil && c.Kind == "DaemonSet"
}

func isMirrorPod(p *corev1.Pod) bool {
	_, ok := p.Annotations[corev1.MirrorPodAnnotationKey]
	return ok
}

func isFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
