package decide

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Reasons, worded as kube-scheduler words them.
const (
	reasonUnschedulable      = "node(s) were unschedulable"
	reasonNodeName           = "node(s) didn't match the requested node name"
	reasonNodeAffinity       = "node(s) didn't match Pod's node affinity/selector"
	reasonNodePorts          = "node(s) didn't have free ports for the requested pod ports"
	reasonTooManyPods        = "Too many pods"
	reasonSpread             = "node(s) didn't match pod topology spread constraints"
	reasonSpreadMissingLabel = "node(s) didn't match pod topology spread constraints (missing required label)"
	reasonExistingAnti       = "node(s) didn't satisfy existing pods anti-affinity rules"
	reasonAnti               = "node(s) didn't match pod anti-affinity rules"
	reasonAffinity           = "node(s) didn't match pod affinity rules"
)

// Fits reports whether pod can be scheduled to node, which already runs
// podsOnNode, and if not, why (kube-scheduler's wording; several reasons are
// joined with ", "). It applies the filters of kube-scheduler's default
// profile that do not need the API: NodeUnschedulable, NodeName,
// TaintToleration (NoSchedule, NoExecute), NodeAffinity (nodeSelector and
// required node affinity), NodePorts, NodeResourcesFit (cpu, memory,
// ephemeral-storage, pod count and every extended resource),
// PodTopologySpread (DoNotSchedule) and InterPodAffinity (required terms),
// the last two with node as the only node of the cluster.
func Fits(pod *corev1.Pod, node *corev1.Node, podsOnNode []*corev1.Pod) (ok bool, reason string) {
	if pod == nil || node == nil {
		return false, "no pod or node"
	}
	w := newWorld(nil, false, nil)
	n := w.addSnapshotNode(&NodeInfo{Node: node, Ready: true, Pods: podsOnNode})
	pi := newPodInfo(pod)
	reasons := w.check(pi, n, nil)
	return len(reasons) == 0, strings.Join(reasons, ", ")
}

// staticReasons runs the filters that depend only on the pod and the node's
// labels, taints and flags.
func staticReasons(pi *podInfo, n *simNode) string {
	pod := pi.pod
	if pi.invalid != "" {
		return pi.invalid
	}
	if n.node.Spec.Unschedulable && !toleratesUnschedulable(pod.Spec.Tolerations) {
		return reasonUnschedulable
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != n.name {
		return reasonNodeName
	}
	if t := untoleratedTaint(n.taints, pod.Spec.Tolerations); t != nil {
		return "node(s) had untolerated taint {" + t.Key + ": " + t.Value + "}"
	}
	if !matchesNodeSelectorAndAffinity(pod, n) {
		return reasonNodeAffinity
	}
	return ""
}

// check returns every reason pi cannot go to n (nil: it fits). tc may be
// nil; it is computed when needed.
func (w *world) check(pi *podInfo, n *simNode, tc *topoCounts) []string {
	if r := staticReasons(pi, n); r != "" {
		return []string{r}
	}
	w.load(n)
	if portsConflict(pi, n) {
		return []string{reasonNodePorts}
	}
	if rs := insufficient(pi, n.alloc, n.used); len(rs) > 0 {
		return rs
	}
	if tc == nil {
		tc = w.counts(pi)
	}
	if r := topologyReason(pi, n, tc); r != "" {
		return []string{r}
	}
	return nil
}

// fitsQuick is check without reasons and with cheap rejections first.
func (w *world) fitsQuick(pi *podInfo, n *simNode, tc **topoCounts) bool {
	if n.loaded && !fitsResources(pi, n.alloc, n.used) {
		return false
	}
	if staticReasons(pi, n) != "" {
		return false
	}
	if !n.loaded {
		w.load(n)
		if !fitsResources(pi, n.alloc, n.used) {
			return false
		}
	}
	if portsConflict(pi, n) {
		return false
	}
	if *tc == nil {
		*tc = w.counts(pi)
	}
	return topologyReason(pi, n, *tc) == ""
}

func toleratesUnschedulable(tols []corev1.Toleration) bool {
	t := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	for i := range tols {
		if tolerates(&tols[i], &t) {
			return true
		}
	}
	return false
}

// untoleratedTaint returns the first NoSchedule or NoExecute taint none of
// the tolerations tolerates.
func untoleratedTaint(taints []corev1.Taint, tols []corev1.Toleration) *corev1.Taint {
	for i := range taints {
		t := &taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		ok := false
		for j := range tols {
			if tolerates(&tols[j], t) {
				ok = true
				break
			}
		}
		if !ok {
			return t
		}
	}
	return nil
}

// tolerates implements the toleration matching rules: empty effect matches
// all effects, empty key (with Exists) all keys, Equal compares values,
// Exists ignores them, Lt/Gt compare the values as integers (taint value
// less/greater than the toleration's).
func tolerates(tol *corev1.Toleration, t *corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != t.Key {
		return false
	}
	switch tol.Operator {
	case "", corev1.TolerationOpEqual:
		return tol.Value == t.Value
	case corev1.TolerationOpExists:
		return true
	case corev1.TolerationOpLt, corev1.TolerationOpGt:
		tv, err1 := strconv.ParseInt(tol.Value, 10, 64)
		nv, err2 := strconv.ParseInt(t.Value, 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if tol.Operator == corev1.TolerationOpLt {
			return nv < tv
		}
		return nv > tv
	}
	return false
}

// matchesNodeSelectorAndAffinity applies spec.nodeSelector and the required
// node affinity (terms ORed; expressions and fields within a term ANDed; a
// term with neither matches nothing).
func matchesNodeSelectorAndAffinity(pod *corev1.Pod, n *simNode) bool {
	for k, v := range pod.Spec.NodeSelector {
		if lv, ok := n.labels[k]; !ok || lv != v {
			return false
		}
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if matchesTerm(&term, n) {
			return true
		}
	}
	return false
}

func matchesTerm(term *corev1.NodeSelectorTerm, n *simNode) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	for i := range term.MatchExpressions {
		r := &term.MatchExpressions[i]
		v, has := n.labels[r.Key]
		if !matchesRequirement(r, v, has) {
			return false
		}
	}
	for i := range term.MatchFields {
		r := &term.MatchFields[i]
		if r.Key != "metadata.name" {
			return false
		}
		if r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn {
			return false
		}
		if !matchesRequirement(r, n.name, true) {
			return false
		}
	}
	return true
}

func matchesRequirement(r *corev1.NodeSelectorRequirement, v string, has bool) bool {
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return has && containsString(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !has || !containsString(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return has
	case corev1.NodeSelectorOpDoesNotExist:
		return !has
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !has || len(r.Values) != 1 {
			return false
		}
		lv, err1 := strconv.ParseInt(v, 10, 64)
		rv, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == corev1.NodeSelectorOpGt {
			return lv > rv
		}
		return lv < rv
	}
	return false
}

func portsConflict(pi *podInfo, n *simNode) bool {
	if len(pi.hostPorts) == 0 {
		return false
	}
	for _, p := range n.pods {
		for _, a := range p.hostPorts {
			for _, b := range pi.hostPorts {
				if a.port == b.port && a.protocol == b.protocol && ipsOverlap(a.ip, b.ip) {
					return true
				}
			}
		}
	}
	return false
}

func ipsOverlap(a, b string) bool {
	wild := func(ip string) bool { return ip == "" || ip == "0.0.0.0" || ip == "::" }
	return wild(a) || wild(b) || a == b
}

// fitsResources is the allocation-free form of insufficient.
func fitsResources(pi *podInfo, alloc, used resources) bool {
	r := &pi.req
	if used.pods+1 > alloc.pods {
		return false
	}
	if r.milliCPU > 0 && r.milliCPU > alloc.milliCPU-used.milliCPU {
		return false
	}
	if r.memory > 0 && r.memory > alloc.memory-used.memory {
		return false
	}
	if r.ephemeral > 0 && r.ephemeral > alloc.ephemeral-used.ephemeral {
		return false
	}
	for _, name := range pi.scalarNames {
		if v := r.scalar[name]; v > 0 && v > alloc.scalar[name]-used.scalar[name] {
			return false
		}
	}
	return true
}

// insufficient lists NodeResourcesFit's reasons for pi on a node with the
// given allocatable and requested totals.
func insufficient(pi *podInfo, alloc, used resources) []string {
	var out []string
	r := &pi.req
	if used.pods+1 > alloc.pods {
		out = append(out, reasonTooManyPods)
	}
	if r.milliCPU > 0 && r.milliCPU > alloc.milliCPU-used.milliCPU {
		out = append(out, "Insufficient cpu")
	}
	if r.memory > 0 && r.memory > alloc.memory-used.memory {
		out = append(out, "Insufficient memory")
	}
	if r.ephemeral > 0 && r.ephemeral > alloc.ephemeral-used.ephemeral {
		out = append(out, "Insufficient ephemeral-storage")
	}
	for _, name := range pi.scalarNames {
		if v := r.scalar[name]; v > 0 && v > alloc.scalar[name]-used.scalar[name] {
			out = append(out, "Insufficient "+string(name))
		}
	}
	return out
}

// topologyReason applies PodTopologySpread then InterPodAffinity (the
// pod's affinity, its anti-affinity, then existing pods' anti-affinity).
func topologyReason(pi *podInfo, n *simNode, tc *topoCounts) string {
	if tc == nil {
		return ""
	}
	if len(pi.spread) > 0 {
		for _, k := range pi.spreadKeys {
			if _, ok := n.labels[k]; !ok {
				return reasonSpreadMissingLabel
			}
		}
		mins := tc.minima(pi)
		for i := range pi.spread {
			c := &pi.spread[i]
			self := 0
			if c.matches(pi.pod, pi.pod) {
				self = 1
			}
			count := tc.spread[i][n.labels[c.topologyKey]]
			if count+self-mins[i] > int(c.maxSkew) {
				return reasonSpread
			}
		}
	}
	if len(pi.affinity) > 0 {
		all := true
		for i := range pi.affinity {
			v, ok := n.labels[pi.affinity[i].topologyKey]
			if !ok || tc.affinity[i][v] == 0 {
				all = false
				break
			}
		}
		if !all {
			// The first pod of a group whose terms select itself may go
			// anywhere, as kube-scheduler allows.
			if tc.affinityAny || !matchesOwnAffinity(pi, tc.nsLabels) {
				return reasonAffinity
			}
		}
	}
	for i := range pi.anti {
		if v, ok := n.labels[pi.anti[i].topologyKey]; ok && tc.anti[i][v] > 0 {
			return reasonAnti
		}
	}
	for key, domains := range tc.existingAnti {
		if v, ok := n.labels[key]; ok && domains[v] {
			return reasonExistingAnti
		}
	}
	return ""
}

func matchesOwnAffinity(pi *podInfo, nsLabels map[string]map[string]string) bool {
	for i := range pi.affinity {
		if !pi.affinity[i].matches(pi.pod, nsLabels) {
			return false
		}
	}
	return true
}
