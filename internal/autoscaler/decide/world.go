package decide

import (
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	provreqv1 "fke.dev/fke/internal/autoscaler/provreq/v1"
)

// simNode is a node in a simulation: a snapshot node, an upcoming machine or
// a new node made from a pool template.
type simNode struct {
	node   *corev1.Node
	name   string
	labels map[string]string
	taints []corev1.Taint
	pool   string
	alloc  resources
	used   resources
	pods   []*podInfo
	// baseLen is the number of pods the node had in the snapshot; pods
	// after it were placed by the simulation.
	baseLen int
	// target: pods may be placed here (ready, not being deleted, not
	// excluded as a scale-down destination).
	target bool
	// gone: removed by a scale-down simulation; the node and its pods no
	// longer exist for any check.
	gone     bool
	gpu      bool // allocatable has a GPU resource
	upcoming bool
	// raw are a snapshot node's pods until load parses them into pods and
	// used; loaded is true once it has (and for simulated nodes).
	raw    []*corev1.Pod
	loaded bool
	idx    int // position in world.nodes
	// freeing is the room this ready node's terminating pods will free
	// (scale-up only; nil when none); released is set once that room was
	// taken out of used (see releaseTerminating).
	freeing  *freeing
	released bool
}

// world is the cluster a simulation runs on.
//
// In overlay mode (scale-up), counts of the snapshot's own pods are computed
// once per pending pod and cached (podInfo.base); pods placed by the
// simulation are kept in placed and nodes added by it after baseCount, and
// both are added on top. In scan mode (scale-down, Fits), every check scans
// the live nodes.
type world struct {
	nodes     []*simNode
	baseCount int
	overlay   bool
	placed    []*podInfo
	antiPods  []*podInfo // pods with required anti-affinity (snapshot ones in overlay mode)
	nsLabels  map[string]map[string]string
	memo      *Memo // parsed bound pods, kept across calls; may be nil
	// lazy: snapshot nodes' pods are parsed when a check first needs them.
	lazy bool

	// Overlay mode: snapshot pods grouped so that a pending pod's selectors
	// are evaluated once per group, and base counts shared by equivalent
	// pending pods.
	antiGroups []*antiGroup
	antiByKey  map[string]*antiGroup
	groups     []*podGroup
	baseCache  map[string]*topoCounts

	// Destination index: targets ordered non-GPU first, and targets per
	// extended resource they have allocatable.
	ordered []*simNode
	byRes   map[corev1.ResourceName][]*simNode
	// static caches staticCandidates by equivalence key.
	static map[string][]*simNode
	// cursors, when not nil, are findNode's per-group cursors (only while
	// nodes only gain pods).
	cursors map[string]*fitCursor
	// now, when set (scale-up), is the time leaving pods' deadlines are
	// compared with (see noteTerminating); leaving is
	// Snapshot.LeavingOwners.
	now     time.Time
	leaving map[types.UID]time.Time
}

// newWorld makes an empty world; memo may be nil.
func newWorld(nsLabels map[string]map[string]string, overlay bool, memo *Memo) *world {
	return &world{nsLabels: nsLabels, overlay: overlay, memo: memo}
}

// startupTaints are removed from templates: a new node carries them only
// until it is initialised.
var startupTaints = map[string]bool{
	corev1.TaintNodeNotReady:                         true,
	corev1.TaintNodeUnreachable:                      true,
	"node.cloudprovider.kubernetes.io/uninitialized": true,
	"ToBeDeletedByClusterAutoscaler":                 true,
	"DeletionCandidateOfClusterAutoscaler":           true,
}

// addSnapshotNode adds a registered node with its pods. In a lazy world the
// pods are parsed on first use (load), unless one of them has required
// anti-affinity, which every other pod's checks need.
func (w *world) addSnapshotNode(ni *NodeInfo) *simNode {
	alloc, anti := w.memo.node(ni)
	n := &simNode{
		node:   ni.Node,
		name:   ni.Node.Name,
		labels: ni.Node.Labels,
		taints: ni.Node.Spec.Taints,
		pool:   ni.Pool,
		alloc:  alloc,
		target: ni.Ready,
		idx:    len(w.nodes),
		raw:    ni.Pods,
	}
	n.gpu = n.alloc.gpuTotal() > 0
	w.nodes = append(w.nodes, n)
	w.baseCount = len(w.nodes)
	w.groups = nil
	if !w.lazy || anti {
		w.load(n)
	}
	return n
}

func hasRequiredAntiAffinity(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if p == nil {
			continue
		}
		if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			return true
		}
	}
	return false
}

// load parses a snapshot node's pods, once.
func (w *world) load(n *simNode) {
	if n.loaded {
		return
	}
	n.loaded = true
	// One allocation for the node's pods instead of one per pod.
	slab := make([]podInfo, 0, len(n.raw))
	for _, p := range n.raw {
		if p == nil || isFinished(p) {
			continue
		}
		slab = append(slab, podInfo{})
		pi := &slab[len(slab)-1]
		w.existingPodInfo(pi, p, n)
		n.used.add(pi.req, 1)
		w.noteTerminating(n, pi)
	}
	n.pods = make([]*podInfo, len(slab))
	for i := range slab {
		n.pods[i] = &slab[i]
	}
	n.baseLen = len(n.pods)
	n.raw = nil
}

// loadAll loads every snapshot node.
func (w *world) loadAll() {
	for _, n := range w.nodes[:w.baseCount] {
		w.load(n)
	}
}

// existingPodInfo fills pi for a bound pod: only what filters for other pods
// need (request, host ports, required anti-affinity), from the memo when the
// pod is unchanged. Pods sharing an equivalence key share one antiGroup.
func (w *world) existingPodInfo(pi *podInfo, p *corev1.Pod, n *simNode) {
	pp := w.memo.get(p)
	*pi = podInfo{pod: p, req: pp.req, scalarNames: pp.scalarNames, gpu: pp.gpu, node: n, hostPorts: pp.hostPorts, groupKey: pp.groupKey}
	if len(pp.anti) == 0 {
		return
	}
	key := equivalenceKey(p)
	var g *antiGroup
	if key != "" {
		g = w.antiByKey[key]
	}
	if g == nil {
		g = &antiGroup{pod: p, terms: pp.anti}
		w.antiGroups = append(w.antiGroups, g)
		if key != "" {
			if w.antiByKey == nil {
				w.antiByKey = map[string]*antiGroup{}
			}
			w.antiByKey[key] = g
		}
	}
	g.nodes = append(g.nodes, n)
	pi.anti = g.terms
	w.antiPods = append(w.antiPods, pi)
}

// equivalenceKey identifies pods that share a spec and labels: same
// controller, namespace and labels. "" for pods without a controller.
func equivalenceKey(p *corev1.Pod) string {
	c := metav1.GetControllerOf(p)
	if c == nil {
		return ""
	}
	return string(c.UID) + "\x00" + p.Namespace + "\x00" + labels.Set(p.Labels).String()
}

// antiGroup is a set of snapshot pods with identical required
// anti-affinity, and the nodes they are on (one entry per pod).
type antiGroup struct {
	pod   *corev1.Pod
	terms []affinityTerm
	nodes []*simNode
}

// podGroup is a set of snapshot pods with the same namespace, labels and
// terminating state: they match the same selectors.
type podGroup struct {
	pod   *corev1.Pod
	nodes []*simNode
}

func (w *world) ensureGroups() {
	if w.groups != nil {
		return
	}
	w.loadAll()
	byKey := map[string]*podGroup{}
	w.groups = []*podGroup{}
	for _, n := range w.nodes[:w.baseCount] {
		for _, p := range n.pods[:n.baseLen] {
			key := p.groupKey
			g := byKey[key]
			if g == nil {
				g = &podGroup{pod: p.pod}
				byKey[key] = g
				w.groups = append(w.groups, g)
			}
			g.nodes = append(g.nodes, n)
		}
	}
}

// poolTemplate is a pool's template prepared once: allocatable less the
// DaemonSet overhead, start-up taints removed.
type poolTemplate struct {
	pool   *Pool
	node   *corev1.Node
	alloc  resources
	taints []corev1.Taint
	gpus   int64 // physical GPUs per node
	gpu    bool  // has GPU resources
}

func newPoolTemplate(p *Pool) *poolTemplate {
	if p.Template == nil {
		return nil
	}
	t := &poolTemplate{pool: p, node: p.Template}
	t.alloc = resourcesFromList(p.Template.Status.Allocatable)
	if _, ok := p.Template.Status.Allocatable[corev1.ResourcePods]; !ok {
		t.alloc.pods = DefaultTemplatePods
	}
	t.alloc.add(resourcesFromList(p.DaemonSetOverhead), -1)
	for _, tt := range p.Template.Spec.Taints {
		if startupTaints[tt.Key] || strings.HasPrefix(tt.Key, "startup-taint.cluster-autoscaler.kubernetes.io/") {
			continue
		}
		t.taints = append(t.taints, tt)
	}
	t.gpu = t.alloc.gpuTotal() > 0
	t.gpus = nodeGPUs(p.Template, resourcesFromList(p.Template.Status.Allocatable))
	return t
}

// newNode makes a simulated node of the template named name; its hostname
// label is set to the name.
func (t *poolTemplate) newNode(name string) *simNode {
	nodeCopy := *t.node
	nodeCopy.Name = name
	lbls := make(map[string]string, len(t.node.Labels)+1)
	for k, v := range t.node.Labels {
		lbls[k] = v
	}
	lbls[corev1.LabelHostname] = name
	nodeCopy.Labels = lbls
	nodeCopy.Spec.Taints = t.taints
	nodeCopy.Spec.Unschedulable = false
	return &simNode{
		node:   &nodeCopy,
		name:   name,
		labels: lbls,
		taints: t.taints,
		pool:   t.pool.Name,
		alloc:  t.alloc.clone(),
		gpu:    t.gpu,
		target: true,
		loaded: true,
	}
}

// addExtraNode appends a simulated node (upcoming or new).
func (w *world) addExtraNode(n *simNode) {
	n.idx = len(w.nodes)
	w.nodes = append(w.nodes, n)
}

// buildIndex (re)builds the destination index over target nodes.
func (w *world) buildIndex() {
	w.ordered = w.ordered[:0]
	w.byRes = make(map[corev1.ResourceName][]*simNode)
	w.static = nil
	for _, n := range w.nodes {
		if n.target && !n.gpu {
			w.ordered = append(w.ordered, n)
		}
	}
	for _, n := range w.nodes {
		if !n.target {
			continue
		}
		if n.gpu {
			w.ordered = append(w.ordered, n)
		}
		for name, v := range n.alloc.scalar {
			if v > 0 {
				w.byRes[name] = append(w.byRes[name], n)
			}
		}
	}
}

// candidates returns the nodes worth trying for a pod: for a pod requesting
// extended resources, the shortest list of nodes having one of them; else
// all targets, non-GPU nodes first.
func (w *world) candidates(pi *podInfo) []*simNode {
	if len(pi.scalarNames) == 0 {
		return w.ordered
	}
	var best []*simNode
	for i, name := range pi.scalarNames {
		list := w.byRes[name]
		if i == 0 || len(list) < len(best) {
			best = list
		}
	}
	return best
}

// staticCandidates is candidates less the nodes that fail pi's static
// filters (taints, node selector and affinity, unschedulable), shared by
// the pods of one controller with the same labels: their specs are equal,
// so the static filters only run once per such group, not once per pod.
func (w *world) staticCandidates(pi *podInfo) []*simNode {
	all := w.candidates(pi)
	key := equivalenceKey(pi.pod)
	if key == "" {
		return all
	}
	if list, ok := w.static[key]; ok {
		return list
	}
	list := make([]*simNode, 0, len(all))
	for _, n := range all {
		if staticReasons(pi, n) == "" {
			list = append(list, n)
		}
	}
	if w.static == nil {
		w.static = map[string][]*simNode{}
	}
	w.static[key] = list
	return list
}

// placeBooked places the pods whose capacity is booked (Snapshot.Booked),
// largest first, on target nodes; pods that fit nowhere are left out (that
// capacity is gone). It returns, per node that took some, the requests
// (namespace/name from the consume annotation) they belong to.
func (w *world) placeBooked(pods []*corev1.Pod) map[*simNode][]string {
	if len(pods) == 0 {
		return nil
	}
	pis := make([]*podInfo, 0, len(pods))
	for _, p := range pods {
		if p != nil {
			pis = append(pis, newPodInfo(p))
		}
	}
	largestFirst(pis)
	out := map[*simNode][]string{}
	for _, pi := range pis {
		n := w.findNode(pi)
		if n == nil {
			continue
		}
		w.place(pi, n)
		by := pi.pod.Namespace + "/" + pi.pod.Annotations[provreqv1.AnnotationConsumeProvisioningRequest]
		if !containsString(out[n], by) {
			out[n] = append(out[n], by)
		}
	}
	return out
}

// largestFirst orders pods by GPUs, then cpu, then memory, descending.
func largestFirst(pis []*podInfo) {
	sort.SliceStable(pis, func(a, b int) bool {
		x, y := pis[a], pis[b]
		if x.gpu != y.gpu {
			return x.gpu > y.gpu
		}
		if x.req.milliCPU != y.req.milliCPU {
			return x.req.milliCPU > y.req.milliCPU
		}
		return x.req.memory > y.req.memory
	})
}

// place puts a copy of pi on n and returns the copy.
func (w *world) place(pi *podInfo, n *simNode) *podInfo {
	w.load(n)
	cp := *pi
	cp.node = n
	cp.base = nil
	n.pods = append(n.pods, &cp)
	n.used.add(pi.req, 1)
	if w.overlay {
		w.placed = append(w.placed, &cp)
	} else if len(cp.anti) > 0 {
		w.antiPods = append(w.antiPods, &cp)
	}
	return &cp
}

// unplace undoes the most recent place on p's node; calls must come in the
// reverse order of place.
func (w *world) unplace(p *podInfo) {
	n := p.node
	n.pods = n.pods[:len(n.pods)-1]
	n.used.add(p.req, -1)
	if w.overlay {
		w.placed = w.placed[:len(w.placed)-1]
	} else if len(p.anti) > 0 {
		w.antiPods = w.antiPods[:len(w.antiPods)-1]
	}
}

type worldMark struct{ nodes, placed int }

func (w *world) mark() worldMark { return worldMark{len(w.nodes), len(w.placed)} }

// reset drops the nodes added and the overlay placements made since m.
// Only valid in overlay mode for placements on nodes added since m.
func (w *world) reset(m worldMark) {
	w.nodes = w.nodes[:m.nodes]
	w.placed = w.placed[:m.placed]
}

// topoCounts are the counts the inter-pod affinity and topology spread
// filters need for one pod, over the current world.
type topoCounts struct {
	affinity    []map[string]int // per required affinity term: domain → matching pods
	affinityAny bool             // some pod matches some affinity term
	anti        []map[string]int // per required anti-affinity term
	// existingAnti: topology key → domains where an existing pod's required
	// anti-affinity term selects this pod.
	existingAnti map[string]map[string]bool
	spread       []map[string]int // per constraint: eligible domain → matching pods
	spreadMin    []int
	minValid     bool
	nsLabels     map[string]map[string]string
}

func newTopoCounts(w *world, pi *podInfo) *topoCounts {
	tc := &topoCounts{nsLabels: w.nsLabels}
	tc.affinity = make([]map[string]int, len(pi.affinity))
	for i := range tc.affinity {
		tc.affinity[i] = map[string]int{}
	}
	tc.anti = make([]map[string]int, len(pi.anti))
	for i := range tc.anti {
		tc.anti[i] = map[string]int{}
	}
	tc.spread = make([]map[string]int, len(pi.spread))
	for i := range tc.spread {
		tc.spread[i] = map[string]int{}
	}
	return tc
}

func (tc *topoCounts) clone() *topoCounts {
	c := &topoCounts{affinityAny: tc.affinityAny, nsLabels: tc.nsLabels}
	cp := func(ms []map[string]int) []map[string]int {
		out := make([]map[string]int, len(ms))
		for i, m := range ms {
			out[i] = make(map[string]int, len(m)+4)
			for k, v := range m {
				out[i][k] = v
			}
		}
		return out
	}
	c.affinity, c.anti, c.spread = cp(tc.affinity), cp(tc.anti), cp(tc.spread)
	if tc.existingAnti != nil {
		c.existingAnti = make(map[string]map[string]bool, len(tc.existingAnti))
		for k, m := range tc.existingAnti {
			c.existingAnti[k] = make(map[string]bool, len(m))
			for v := range m {
				c.existingAnti[k][v] = true
			}
		}
	}
	return c
}

// spreadEligible reports whether node n counts for spread constraint c of
// pi: it has every constraint's key and, per c's policies, passes the pod's
// node selector/affinity and taints.
func spreadEligible(pi *podInfo, n *simNode, c *spreadConstraint) bool {
	for _, k := range pi.spreadKeys {
		if _, ok := n.labels[k]; !ok {
			return false
		}
	}
	if c.honorAffinity && !matchesNodeSelectorAndAffinity(pi.pod, n) {
		return false
	}
	if c.honorTaints && untoleratedTaint(n.taints, pi.pod.Spec.Tolerations) != nil {
		return false
	}
	return true
}

// addNode records n's spread domains and, when withPods, counts pods.
func (tc *topoCounts) addNode(w *world, pi *podInfo, n *simNode, pods []*podInfo) {
	for i := range pi.spread {
		c := &pi.spread[i]
		if !spreadEligible(pi, n, c) {
			continue
		}
		v := n.labels[c.topologyKey]
		cnt := tc.spread[i][v]
		for _, p := range pods {
			if c.matches(pi.pod, p.pod) {
				cnt++
			}
		}
		tc.spread[i][v] = cnt
	}
	if len(pi.affinity) == 0 && len(pi.anti) == 0 {
		return
	}
	for _, p := range pods {
		tc.addAffinityPod(w, pi, n, p)
	}
}

func (tc *topoCounts) addAffinityPod(w *world, pi *podInfo, n *simNode, p *podInfo) {
	for i := range pi.affinity {
		t := &pi.affinity[i]
		if v, ok := n.labels[t.topologyKey]; ok && t.matches(p.pod, w.nsLabels) {
			tc.affinity[i][v]++
			tc.affinityAny = true
		}
	}
	for i := range pi.anti {
		t := &pi.anti[i]
		if v, ok := n.labels[t.topologyKey]; ok && t.matches(p.pod, w.nsLabels) {
			tc.anti[i][v]++
		}
	}
}

// addPlacedPod counts one pod placed by the simulation (overlay mode).
func (tc *topoCounts) addPlacedPod(w *world, pi *podInfo, p *podInfo) {
	n := p.node
	for i := range pi.spread {
		c := &pi.spread[i]
		if c.matches(pi.pod, p.pod) && spreadEligible(pi, n, c) {
			tc.spread[i][n.labels[c.topologyKey]]++
		}
	}
	tc.addAffinityPod(w, pi, n, p)
	tc.addExistingAnti(w, pi, p)
}

// addExistingAnti records where existing pod p's anti-affinity forbids pi.
func (tc *topoCounts) addExistingAnti(w *world, pi *podInfo, p *podInfo) {
	for i := range p.anti {
		t := &p.anti[i]
		v, ok := p.node.labels[t.topologyKey]
		if !ok || !t.matches(pi.pod, w.nsLabels) {
			continue
		}
		if tc.existingAnti == nil {
			tc.existingAnti = map[string]map[string]bool{}
		}
		if tc.existingAnti[t.topologyKey] == nil {
			tc.existingAnti[t.topologyKey] = map[string]bool{}
		}
		tc.existingAnti[t.topologyKey][v] = true
	}
	tc.minValid = false
}

// counts returns the topology counts for pi over the current world; they
// are empty when no inter-pod or spread constraint can apply to it.
func (w *world) counts(pi *podInfo) *topoCounts {
	if !pi.hasTopology() && len(w.antiPods) == 0 && !w.placedHasAnti() {
		return &topoCounts{}
	}
	if !w.overlay {
		w.loadAll()
		tc := newTopoCounts(w, pi)
		for _, n := range w.nodes {
			if !pi.hasTopology() {
				break
			}
			if !n.gone {
				tc.addNode(w, pi, n, n.pods)
			}
		}
		for _, p := range w.antiPods {
			if !p.node.gone {
				tc.addExistingAnti(w, pi, p)
			}
		}
		return tc
	}
	if pi.base == nil {
		pi.base = w.baseCounts(pi)
	}
	tc := pi.base.clone()
	for _, n := range w.nodes[w.baseCount:] {
		tc.addNode(w, pi, n, nil)
	}
	for _, p := range w.placed {
		tc.addPlacedPod(w, pi, p)
	}
	return tc
}

// baseCounts counts the snapshot's own pods for pi, by group; equivalent
// pending pods share the result.
func (w *world) baseCounts(pi *podInfo) *topoCounts {
	key := equivalenceKey(pi.pod)
	if key != "" {
		if tc, ok := w.baseCache[key]; ok {
			return tc
		}
	}
	base := newTopoCounts(w, pi)
	if pi.hasTopology() {
		w.ensureGroups()
		nodes := w.nodes[:w.baseCount]
		eligible := make([][]bool, len(pi.spread))
		for i := range pi.spread {
			c := &pi.spread[i]
			eligible[i] = make([]bool, len(nodes))
			for j, n := range nodes {
				if spreadEligible(pi, n, c) {
					eligible[i][j] = true
					base.spread[i][n.labels[c.topologyKey]] += 0
				}
			}
		}
		for _, g := range w.groups {
			for i := range pi.spread {
				c := &pi.spread[i]
				if !c.matches(pi.pod, g.pod) {
					continue
				}
				for _, n := range g.nodes {
					if eligible[i][n.idx] {
						base.spread[i][n.labels[c.topologyKey]]++
					}
				}
			}
			for i := range pi.affinity {
				t := &pi.affinity[i]
				if !t.matches(g.pod, w.nsLabels) {
					continue
				}
				for _, n := range g.nodes {
					if v, ok := n.labels[t.topologyKey]; ok {
						base.affinity[i][v]++
						base.affinityAny = true
					}
				}
			}
			for i := range pi.anti {
				t := &pi.anti[i]
				if !t.matches(g.pod, w.nsLabels) {
					continue
				}
				for _, n := range g.nodes {
					if v, ok := n.labels[t.topologyKey]; ok {
						base.anti[i][v]++
					}
				}
			}
		}
	}
	for _, g := range w.antiGroups {
		for i := range g.terms {
			t := &g.terms[i]
			if !t.matches(pi.pod, w.nsLabels) {
				continue
			}
			for _, n := range g.nodes {
				if v, ok := n.labels[t.topologyKey]; ok {
					if base.existingAnti == nil {
						base.existingAnti = map[string]map[string]bool{}
					}
					if base.existingAnti[t.topologyKey] == nil {
						base.existingAnti[t.topologyKey] = map[string]bool{}
					}
					base.existingAnti[t.topologyKey][v] = true
				}
			}
		}
	}
	if key != "" {
		if w.baseCache == nil {
			w.baseCache = map[string]*topoCounts{}
		}
		w.baseCache[key] = base
	}
	return base
}

func (w *world) placedHasAnti() bool {
	for _, p := range w.placed {
		if len(p.anti) > 0 {
			return true
		}
	}
	return false
}

// addDomain records a node added after the counts were taken (a new
// template node: no pods yet).
func (tc *topoCounts) addDomain(w *world, pi *podInfo, n *simNode) {
	tc.addNode(w, pi, n, nil)
	tc.minValid = false
}

func (tc *topoCounts) minima(pi *podInfo) []int {
	if tc.minValid {
		return tc.spreadMin
	}
	tc.spreadMin = make([]int, len(pi.spread))
	for i := range pi.spread {
		m, first := 0, true
		for _, v := range tc.spread[i] {
			if first || v < m {
				m, first = v, false
			}
		}
		if int32(len(tc.spread[i])) < pi.spread[i].minDomains {
			m = 0
		}
		tc.spreadMin[i] = m
	}
	tc.minValid = true
	return tc.spreadMin
}

// sortedKeys returns a map's keys in order (for stable reasons).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
