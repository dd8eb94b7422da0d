package decide

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ScaleDown decides which nodes are unneeded and which of them to remove now.
//
// A ready node of a listed pool is a candidate when its utilization (the
// largest requested fraction of allocatable cpu, memory and, on GPU nodes,
// GPU resources, counting neither DaemonSet nor mirror pods) is below the
// pool's threshold, or when it is a GPU node on which no pod holds a GPU. A
// candidate is unneeded when none of its pods blocks (see blockReason and
// PodDisruptionBudgets) and all its pods fit on other ready nodes. The
// simulation treats every node found unneeded earlier in the same call as
// gone, moves pods only to nodes that stay, and never to GPU nodes that are
// themselves candidates. Nodes already unneeded are examined first (oldest
// first), so the clock keeps running on the same nodes. A pool never drops
// below MinSize: unneeded nodes are counted per pool against
// Current - (nodes being deleted).
//
// unneededSince is not modified; the plan carries the new map. A node is
// removed once it has been unneeded for the pool's ScaleDownUnneededTime.
func ScaleDown(s Snapshot, pools []Pool, unneededSince map[string]time.Time, now time.Time) ScaleDownPlan {
	plan := ScaleDownPlan{UnneededSince: map[string]time.Time{}, Kept: map[string]string{}}
	poolByName := make(map[string]*Pool, len(pools))
	for i := range pools {
		if _, dup := poolByName[pools[i].Name]; !dup {
			poolByName[pools[i].Name] = &pools[i]
		}
	}
	s.Memo.begin()
	defer s.Memo.end()
	w := newWorld(s.Namespaces, false, s.Memo)
	// Only candidates are loaded up front; other nodes' pods are parsed when
	// a moved pod passes their static filters.
	w.lazy = true
	deleting := map[string]int{}
	var cands []*candidate
	for i := range s.Nodes {
		ni := &s.Nodes[i]
		if ni.Node == nil {
			continue
		}
		if ni.Deleting {
			deleting[ni.Pool]++
			continue
		}
		n := w.addSnapshotNode(ni)
		if poolByName[ni.Pool] != nil {
			w.load(n)
		}
		c, kept := newCandidate(ni, n, poolByName[ni.Pool])
		if kept != "" {
			plan.Kept[n.name] = kept
			continue
		}
		if since, ok := unneededSince[n.name]; ok {
			c.since, c.wasUnneeded = since, true
		}
		cands = append(cands, c)
	}
	// Booked capacity is taken first; a node holding some is not unneeded.
	w.buildIndex()
	booked := w.placeBooked(s.Booked)
	kept := cands[:0]
	for _, c := range cands {
		if by := booked[c.node]; len(by) > 0 {
			plan.Kept[c.node.name] = "capacity booked by ProvisioningRequest " + strings.Join(by, ", ")
			continue
		}
		kept = append(kept, c)
	}
	cands = kept
	for _, c := range cands {
		if c.node.gpu {
			c.node.target = false // never a destination for another node's pods
		}
	}
	w.buildIndex()
	sort.SliceStable(cands, func(a, b int) bool {
		x, y := cands[a], cands[b]
		if x.wasUnneeded != y.wasUnneeded {
			return x.wasUnneeded
		}
		if x.wasUnneeded && !x.since.Equal(y.since) {
			return x.since.Before(y.since)
		}
		if x.gpuIdle != y.gpuIdle {
			return x.gpuIdle
		}
		if x.util != y.util {
			return x.util < y.util
		}
		return x.node.name < y.node.name
	})

	left := map[string]int{}
	for name, p := range poolByName {
		left[name] = p.Current - deleting[name]
	}
	budgets := newPDBBudgets(s.PDBs)
	for _, c := range cands {
		name := c.node.name
		p := c.pool
		if left[p.Name]-1 < p.MinSize {
			plan.Kept[name] = fmt.Sprintf("pool %s at min size %d", p.Name, p.MinSize)
			continue
		}
		if r := budgets.blockReason(c.movable); r != "" {
			plan.Kept[name] = r
			continue
		}
		if r := w.moveAway(c); r != "" {
			plan.Kept[name] = r
			continue
		}
		left[p.Name]--
		budgets.take(c.movable)
		since := now
		if c.wasUnneeded && !c.since.After(now) {
			since = c.since
		}
		plan.UnneededSince[name] = since
		wait := p.ScaleDownUnneededTime
		if wait <= 0 {
			wait = DefaultScaleDownUnneededTime
		}
		if unneeded := now.Sub(since); unneeded < wait {
			plan.Kept[name] = fmt.Sprintf("unneeded for %s, removable after %s (%s)", unneeded, wait, c.why)
			continue
		}
		plan.Remove = append(plan.Remove, NodeRemoval{
			Node:          name,
			Pool:          p.Name,
			UnneededSince: since,
			Reason:        c.why,
			Evict:         podsOf(c.movable),
		})
	}
	return plan
}

// candidate is a node that may be unneeded.
type candidate struct {
	node        *simNode
	pool        *Pool
	util        float64
	gpuIdle     bool
	why         string
	movable     []*podInfo // pods that must move (full constraints compiled)
	since       time.Time
	wasUnneeded bool
}

// newCandidate returns the node as a candidate, or why it is kept.
func newCandidate(ni *NodeInfo, n *simNode, p *Pool) (*candidate, string) {
	switch {
	case p == nil:
		return nil, "node is not in an autoscaled pool"
	case !ni.Ready:
		return nil, "node is not ready"
	case ni.Node.Annotations[AnnotationDoNotDisrupt] == "true":
		return nil, "node has annotation " + AnnotationDoNotDisrupt + "=true"
	case ni.Node.Annotations[AnnotationScaleDownDisabled] == "true":
		return nil, "node has annotation " + AnnotationScaleDownDisabled + "=true"
	}
	c := &candidate{node: n, pool: p}
	var req resources
	for _, pi := range n.pods {
		pod := pi.pod
		if isDaemonSetPod(pod) || isMirrorPod(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		req.add(pi.req, 1)
		c.movable = append(c.movable, newPodInfo(pod))
	}
	util := math.Max(fraction(req.milliCPU, n.alloc.milliCPU), fraction(req.memory, n.alloc.memory))
	if n.gpu {
		gpuUsed := false
		for name, a := range n.alloc.scalar {
			if IsGPUResource(name) && a > 0 {
				util = math.Max(util, fraction(req.scalar[name], a))
				if req.scalar[name] > 0 {
					gpuUsed = true
				}
			}
		}
		c.gpuIdle = !gpuUsed
	}
	c.util = util
	threshold := p.ScaleDownUtilizationThreshold
	if threshold == 0 {
		threshold = DefaultScaleDownUtilizationThreshold
	}
	switch {
	case c.gpuIdle:
		c.why = "no GPU allocated"
	case threshold > 0 && util < threshold:
		c.why = fmt.Sprintf("utilization %.2f below threshold %.2f", util, threshold)
	case threshold < 0:
		return nil, "GPUs allocated and the utilization rule is disabled"
	default:
		return nil, fmt.Sprintf("utilization %.2f is not below threshold %.2f", util, threshold)
	}
	return c, ""
}

// moveAway simulates removing c's node: marks it gone and places each of
// its movable pods (largest first) on another node. On success the moves
// stay in the world; otherwise everything is undone and the reason
// returned.
func (w *world) moveAway(c *candidate) string {
	c.node.gone = true
	pods := append([]*podInfo(nil), c.movable...)
	largestFirst(pods)
	var moved []*podInfo
	for _, pi := range pods {
		n := w.findNode(pi)
		if n == nil {
			w.undo(c, moved)
			return fmt.Sprintf("pod %s cannot be moved: no other node fits it", pi.key())
		}
		moved = append(moved, w.place(pi, n))
	}
	return ""
}

func (w *world) undo(c *candidate, moved []*podInfo) {
	for i := len(moved) - 1; i >= 0; i-- {
		w.unplace(moved[i])
	}
	c.node.gone = false
}

// blockingPodReason says why a pod keeps its node, or "".
func blockingPodReason(p *corev1.Pod) string {
	key := p.Namespace + "/" + p.Name
	if p.Annotations[AnnotationDoNotDisrupt] == "true" {
		return fmt.Sprintf("pod %s has annotation %s=true", key, AnnotationDoNotDisrupt)
	}
	switch p.Annotations[AnnotationSafeToEvict] {
	case "false":
		return fmt.Sprintf("pod %s has annotation %s=false", key, AnnotationSafeToEvict)
	case "true":
		return ""
	}
	if metav1.GetControllerOf(p) == nil {
		return fmt.Sprintf("pod %s is not replicated (no controller)", key)
	}
	for _, v := range p.Spec.Volumes {
		if v.HostPath != nil || (v.EmptyDir != nil && v.EmptyDir.Medium != corev1.StorageMediumMemory) {
			return fmt.Sprintf("pod %s has local storage (volume %s)", key, v.Name)
		}
	}
	return ""
}

// pdbBudgets tracks how many more disruptions each PDB allows in this plan.
type pdbBudgets struct {
	pdbs []pdbBudget
}

type pdbBudget struct {
	name, namespace string
	selector        labels.Selector
	left            int32
}

func newPDBBudgets(pdbs []policyv1.PodDisruptionBudget) *pdbBudgets {
	b := &pdbBudgets{}
	for i := range pdbs {
		p := &pdbs[i]
		// A nil selector selects nothing; an empty one every pod of the
		// namespace. An invalid one is treated as selecting every pod of
		// the namespace, to err on the side of not disrupting.
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil {
			sel = labels.Everything()
		}
		b.pdbs = append(b.pdbs, pdbBudget{name: p.Name, namespace: p.Namespace, selector: sel, left: p.Status.DisruptionsAllowed})
	}
	return b
}

func (b *pdbBudgets) matching(p *corev1.Pod) []int {
	var out []int
	for i := range b.pdbs {
		d := &b.pdbs[i]
		if d.namespace == p.Namespace && d.selector.Matches(labels.Set(p.Labels)) {
			out = append(out, i)
		}
	}
	return out
}

// blockReason returns why the pods cannot all be evicted: a blocking pod,
// a kube-system pod without PDB, or a PDB that would be exceeded.
func (b *pdbBudgets) blockReason(pods []*podInfo) string {
	need := map[int]int32{}
	for _, pi := range pods {
		if r := blockingPodReason(pi.pod); r != "" {
			return r
		}
		m := b.matching(pi.pod)
		if pi.pod.Namespace == metav1.NamespaceSystem && len(m) == 0 && pi.pod.Annotations[AnnotationSafeToEvict] != "true" {
			return fmt.Sprintf("kube-system pod %s has no PodDisruptionBudget", pi.key())
		}
		for _, i := range m {
			need[i]++
			if d := &b.pdbs[i]; need[i] > d.left {
				return fmt.Sprintf("pod %s is protected by PodDisruptionBudget %s/%s (%d disruptions allowed)", pi.key(), d.namespace, d.name, max(d.left, 0))
			}
		}
	}
	return ""
}

// take consumes the disruptions evicting pods uses.
func (b *pdbBudgets) take(pods []*podInfo) {
	for _, pi := range pods {
		for _, i := range b.matching(pi.pod) {
			b.pdbs[i].left--
		}
	}
}
