package decide

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Memo keeps what the decision code parses from pods bound to nodes (their
// effective requests, host ports, required anti-affinity terms and label
// grouping key) from one call to the next, so a pass over a large cluster
// only parses the pods that changed. Entries are keyed by pod UID and
// checked against the pod's resourceVersion; pods without a UID or a
// resourceVersion are parsed every time.
//
// A Memo never changes a decision: ScaleUp and ScaleDown return the same
// plan with or without one. It belongs to one caller (one cluster's
// autoscaler) and is not safe for concurrent use; the zero value is not
// usable, call NewMemo.
type Memo struct {
	pods map[types.UID]*parsedPod
	// gen counts calls; entries not used for memoKeep calls are dropped.
	gen uint64
}

// memoKeep is how many calls an unused entry survives; the memo is swept
// every memoKeep calls, so a sweep's cost is spread over them.
const memoKeep = 16

// NewMemo returns an empty Memo.
func NewMemo() *Memo {
	return &Memo{pods: map[types.UID]*parsedPod{}}
}

// Len returns the number of pods the memo holds.
func (m *Memo) Len() int { return len(m.pods) }

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
}
