package decide

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Memo keeps what the decision code parses from pods bound to nodes (their
// effective requests, host ports, required anti-affinity terms and label
// grouping key) and from nodes (their allocatable, whether one of their pods
// has required anti-affinity) from one call to the next, so a pass over a
// large cluster only parses what changed. Pod entries are keyed by pod UID
// and checked against the pod's resourceVersion; pods without a UID or a
// resourceVersion are parsed every time. Node entries are keyed by node name
// and checked against the node's resourceVersion and its pod slice (see
// NodeInfo.Pods: a slice is not changed in place while a Memo is used).
//
// A Memo never changes a decision: ScaleUp and ScaleDown return the same
// plan with or without one. It belongs to one caller (one cluster's
// autoscaler) and is not safe for concurrent use; the zero value is not
// usable, call NewMemo.
type Memo struct {
	pods  map[types.UID]*parsedPod
	nodes map[string]*parsedNode
	// gen counts calls; entries not used for memoKeep calls are dropped.
	gen uint64
}

// memoKeep is how many calls an unused entry survives; the memo is swept
// every memoKeep calls, so a sweep's cost is spread over them.
const memoKeep = 16

// NewMemo returns an empty Memo.
func NewMemo() *Memo {
	return &Memo{pods: map[types.UID]*parsedPod{}, nodes: map[string]*parsedNode{}}
}

// Len returns the number of pods the memo holds.
func (m *Memo) Len() int { return len(m.pods) }

// parsedNode is what the simulation needs from a snapshot node.
type parsedNode struct {
	rv  string
	gen uint64
	// alloc is shared by every call's simNode: read only.
	alloc resources
	// pods is the first element of the pod slice anti was computed from,
	// podsLen its length: together they identify the slice.
	pods    **corev1.Pod
	podsLen int
	anti    bool
}

// node returns a snapshot node's allocatable and whether one of its pods
// has required anti-affinity, from the memo when the node and its pod slice
// are unchanged. A nil Memo computes them every time.
func (m *Memo) node(ni *NodeInfo) (alloc resources, anti bool) {
	n := ni.Node
	if m == nil || n.ResourceVersion == "" {
		return resourcesFromList(n.Status.Allocatable), hasRequiredAntiAffinity(ni.Pods)
	}
	var head **corev1.Pod
	if len(ni.Pods) > 0 {
		head = &ni.Pods[0]
	}
	pn, ok := m.nodes[n.Name]
	if !ok || pn.rv != n.ResourceVersion {
		pn = &parsedNode{rv: n.ResourceVersion, alloc: resourcesFromList(n.Status.Allocatable), podsLen: -1}
		m.nodes[n.Name] = pn
	}
	if pn.podsLen != len(ni.Pods) || pn.pods != head {
		pn.anti = hasRequiredAntiAffinity(ni.Pods)
		pn.pods, pn.podsLen = head, len(ni.Pods)
	}
	pn.gen = m.gen
	return pn.alloc, pn.anti
}

// parsedPod is what the simulation needs from a bound pod.
type parsedPod struct {
	rv  string
	gen uint64
	req resources // includes pods: 1
	// scalarNames and gpu are as in podInfo.
	scalarNames []corev1.ResourceName
	gpu         int64
	// hostPorts are the host ports the pod holds.
	hostPorts []hostPort
	// anti are the pod's required anti-affinity terms, compiled.
	anti []affinityTerm
	// groupKey groups pods that match the same selectors: namespace, labels
	// and terminating state.
	groupKey string
}

func parsePod(p *corev1.Pod) *parsedPod {
	pp := &parsedPod{rv: p.ResourceVersion, req: podRequests(p), hostPorts: hostPortsOf(p), groupKey: groupKeyOf(p)}
	pp.req.pods = 1
	pp.scalarNames = sortedScalarNames(pp.req)
	pp.gpu = pp.req.gpuTotal()
	if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
		for i := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			// An invalid selector selects nothing: the term cannot forbid.
			t, _ := compileAffinityTerm(p, &a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[i])
			pp.anti = append(pp.anti, t)
		}
	}
	return pp
}

// groupKeyOf is the key of the selector-equivalence group of a pod.
func groupKeyOf(p *corev1.Pod) string {
	key := p.Namespace + "\x00" + labels.Set(p.Labels).String()
	if p.DeletionTimestamp != nil {
		key += "\x00terminating"
	}
	return key
}

// begin starts a call.
func (m *Memo) begin() {
	if m != nil {
		m.gen++
	}
}

// get returns the parsed form of p, from the memo when p is unchanged.
// A nil Memo parses every time.
func (m *Memo) get(p *corev1.Pod) *parsedPod {
	if m == nil || p.UID == "" || p.ResourceVersion == "" {
		return parsePod(p)
	}
	if pp, ok := m.pods[p.UID]; ok && pp.rv == p.ResourceVersion {
		pp.gen = m.gen
		return pp
	}
	pp := parsePod(p)
	pp.gen = m.gen
	m.pods[p.UID] = pp
	return pp
}

// end drops, every memoKeep calls, the pods not seen for memoKeep calls.
func (m *Memo) end() {
	if m == nil || m.gen%memoKeep != 0 {
		return
	}
	for uid, pp := range m.pods {
		if pp.gen+memoKeep <= m.gen {
			delete(m.pods, uid)
		}
	}
	for name, pn := range m.nodes {
		if pn.gen+memoKeep <= m.gen {
			delete(m.nodes, name)
		}
	}
}
