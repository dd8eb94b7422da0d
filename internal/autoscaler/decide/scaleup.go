package decide

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Reasons a pool cannot take more nodes.
const (
	reasonNoTemplate     = "pool has no template"
	reasonBackoff        = "pool backing off"
	reasonMaxSize        = "max size reached"
	reasonMaxNodes       = "max cluster nodes limit reached"
	reasonMaxGPUs        = "max cluster GPUs limit reached"
	reasonGPUPoolForCPU  = "pool has GPUs and the pod requests none (a non-GPU pool fits it)"
	reasonNoPools        = "no node pools"
	reasonPodTerminating = "pod is being deleted"
	reasonOwnerLeaving   = "pod's controller is being deleted"
	reasonPodGated       = "pod has scheduling gates"
)

// ScaleUp decides which pools grow, and by how much, for the pending pods.
//
// Pending pods are first placed, in scheduling-queue order (priority, then
// age), on free room of ready nodes and on the pool's upcoming machines
// (simulated from the template); those trigger nothing. Pods that fit none
// of it are then placed, in the same order, on the room that pods
// terminating on ready nodes, or whose controller is leaving
// (Snapshot.LeavingOwners), will free, counting only those pods before
// their deadline (LeavingDeadline): those wait for that room
// (Schedulable, AwaitsTermination) and trigger nothing either. Pods still
// waiting for their controllers to be seen (Snapshot.AwaitingOwners) stop
// there (ScaleUpPlan.AwaitingOwners). For the rest, each
// eligible pool (has a template, not backing off, below MaxSize and the
// cluster limits) packs them into new template nodes, first-fit decreasing by
// GPU request then dominant resource, up to the nodes it may add; the
// expander picks one option, it is committed, and the remaining pods are
// tried again until no pool helps any. A GPU pool is tried for a pod that
// requests no GPU only if no eligible non-GPU pool fits it.
func ScaleUp(s Snapshot, pools []Pool, e Expander, now time.Time) ScaleUpPlan {
	var plan ScaleUpPlan
	s.Memo.begin()
	defer s.Memo.end()
	w := newWorld(s.Namespaces, true, s.Memo)
	w.lazy = true
	w.now = now
	w.leaving = s.LeavingOwners
	for i := range s.Nodes {
		ni := &s.Nodes[i]
		if ni.Node == nil || ni.Deleting {
			continue
		}
		w.addSnapshotNode(ni)
	}
	su := &scaleUp{w: w, pools: pools, now: now, snapshot: &s}
	su.tmpls = make([]*poolTemplate, len(pools))
	seen := map[string]bool{}
	for i := range pools {
		p := &pools[i]
		if seen[p.Name] {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("pool %q listed twice; the second is ignored", p.Name))
			continue
		}
		seen[p.Name] = true
		su.tmpls[i] = newPoolTemplate(p)
		if su.tmpls[i] == nil {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("pool %q has no template; it cannot grow", p.Name))
			continue
		}
		for j := 0; j < p.Upcoming; j++ {
			n := su.tmpls[i].newNode(fmt.Sprintf("upcoming-%s-%d", p.Name, j))
			n.upcoming = true
			w.addExtraNode(n)
		}
	}
	w.buildIndex()
	w.placeBooked(s.Booked)
	su.added = make([]int, len(pools))
	su.clusterNodes, su.clusterGPUs = clusterUsage(&s, pools, su.tmpls)
	switch e.Name {
	case "", ExpanderLeastWaste, ExpanderPrice, ExpanderPriority, ExpanderRandom:
	default:
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("unknown expander %q; using %s", e.Name, ExpanderLeastWaste))
		e.Name = ExpanderLeastWaste
	}
	su.expander = e

	var remaining []*podInfo
	// Pods only gain nodes from here to grow: equivalent pods may skip the
	// nodes that already turned one of them down (see fitCursor).
	w.cursors = map[string]*fitCursor{}
	for _, pi := range preparePending(s.Pending, s.LeavingOwners, now, &plan) {
		if pi.invalid != "" {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("pod %s: %s", pi.key(), pi.invalid))
			plan.NotTriggerScaleUp = append(plan.NotTriggerScaleUp, PodReason{Pod: pi.pod, Reason: pi.invalid})
			continue
		}
		if n := w.findNode(pi); n != nil {
			w.place(pi, n)
			plan.Schedulable = append(plan.Schedulable, PodPlacement{Pod: pi.pod, Node: n.name, Pool: n.pool, Upcoming: n.upcoming})
			continue
		}
		remaining = append(remaining, pi)
	}
	w.cursors = nil
	remaining = w.awaitTermination(remaining, &plan)
	remaining = awaitOwners(remaining, s.AwaitingOwners, now, &plan)
	su.grow(remaining, &plan)
	return plan
}

// preparePending parses the pending pods in scheduling-queue order, leaving
// out (with a reason) pods that are not really waiting for a node: pods
// being deleted, pods whose controller is leaving (before their deadline
// at now, see LeavingDeadline) and gated pods.
func preparePending(pending []*corev1.Pod, leaving map[types.UID]time.Time, now time.Time, plan *ScaleUpPlan) []*podInfo {
	out := make([]*podInfo, 0, len(pending))
	for _, p := range pending {
		switch {
		case p == nil:
			continue
		case p.DeletionTimestamp != nil:
			plan.NotTriggerScaleUp = append(plan.NotTriggerScaleUp, PodReason{Pod: p, Reason: reasonPodTerminating})
			continue
		case ownerLeaving(p, leaving, now):
			plan.NotTriggerScaleUp = append(plan.NotTriggerScaleUp, PodReason{Pod: p, Reason: reasonOwnerLeaving})
			continue
		case len(p.Spec.SchedulingGates) > 0:
			plan.NotTriggerScaleUp = append(plan.NotTriggerScaleUp, PodReason{Pod: p, Reason: reasonPodGated})
			continue
		}
		out = append(out, newPodInfo(p))
	}
	sort.SliceStable(out, func(i, j int) bool {
		pi, pj := podPriority(out[i].pod), podPriority(out[j].pod)
		if pi != pj {
			return pi > pj
		}
		return out[i].pod.CreationTimestamp.Before(&out[j].pod.CreationTimestamp)
	})
	return out
}

// awaitOwners takes out of pods those still waiting for their controllers
// to be seen at now (see Snapshot.AwaitingOwners), lists them in
// plan.AwaitingOwners and brings plan.RecheckAt to the end of the earliest
// wait; it returns the others.
func awaitOwners(pods []*podInfo, until map[types.UID]time.Time, now time.Time, plan *ScaleUpPlan) []*podInfo {
	if len(until) == 0 {
		return pods
	}
	rest := pods[:0:0]
	for _, pi := range pods {
		t, ok := until[pi.pod.UID]
		if !ok || !t.After(now) {
			rest = append(rest, pi)
			continue
		}
		plan.AwaitingOwners = append(plan.AwaitingOwners, pi.pod)
		if plan.RecheckAt.IsZero() || t.Before(plan.RecheckAt) {
			plan.RecheckAt = t
		}
	}
	return rest
}

// ownerLeaving reports whether p's controller is leaving and p's deadline
// is after now.
func ownerLeaving(p *corev1.Pod, leaving map[types.UID]time.Time, now time.Time) bool {
	d, ok := LeavingDeadline(p, leaving)
	return ok && d.After(now)
}

func podPriority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// findNode returns the first target node pi fits on, or nil.
func (w *world) findNode(pi *podInfo) *simNode {
	if pi.invalid != "" {
		return nil
	}
	var tc *topoCounts
	return w.firstFit(pi, w.staticCandidates(pi), cursorIn(w.cursors, pi), &tc)
}

// firstFit returns the first of nodes, from c on (nil: from the start),
// that pi fits, and moves c there; nil when none does. tc is as in
// fitsQuick.
func (w *world) firstFit(pi *podInfo, nodes []*simNode, c *fitCursor, tc **topoCounts) *simNode {
	start := 0
	if c != nil {
		start = c.next
	}
	for j := start; j < len(nodes); j++ {
		n := nodes[j]
		if n.gone || !n.target {
			continue
		}
		if w.fitsQuick(pi, n, tc) {
			if c != nil {
				c.next = j
			}
			return n
		}
	}
	if c != nil {
		c.next = len(nodes) // every node so far turned it down
	}
	return nil
}

// fitCursor is where the next pod of an equivalence group starts its
// first-fit scan. While nodes only gain pods, a node that turned down one
// pod turns down an identical pod too: resources, host ports and
// anti-affinity only get tighter. Pods with topology spread or required pod
// affinity get no cursor, as pods placed elsewhere can open a node for them.
type fitCursor struct {
	req  resources
	next int
}

// cursorIn returns pi's group cursor in cursors, made on first use; nil
// when cursors is nil or cursors do not apply to pi.
func cursorIn(cursors map[string]*fitCursor, pi *podInfo) *fitCursor {
	if cursors == nil || len(pi.spread) > 0 || len(pi.affinity) > 0 {
		return nil
	}
	key := equivalenceKey(pi.pod)
	if key == "" {
		return nil
	}
	c := cursors[key]
	if c == nil || !c.req.equal(pi.req) {
		// Requests can differ within a group (set per pod by an admission
		// webhook): a pod of other requests starts over.
		c = &fitCursor{req: pi.req}
		cursors[key] = c
	}
	return c
}

// clusterUsage counts the nodes and physical GPUs the cluster has or will
// have: every pool's Current+Upcoming (from its template), plus registered
// nodes of no listed pool. Without a GPU limit, gpus counts only the pools.
func clusterUsage(s *Snapshot, pools []Pool, tmpls []*poolTemplate) (nodes int, gpus int64) {
	known := make(map[string]bool, len(pools))
	for i := range pools {
		p := &pools[i]
		if known[p.Name] {
			continue
		}
		known[p.Name] = true
		n := p.Current + p.Upcoming
		nodes += n
		if tmpls[i] != nil {
			gpus += int64(n) * tmpls[i].gpus
		}
	}
	for i := range s.Nodes {
		ni := &s.Nodes[i]
		if ni.Node == nil || ni.Deleting || known[ni.Pool] {
			continue
		}
		nodes++
		if s.Limits.MaxGPUs > 0 { // parsing every node's allocatable is only worth it under a limit
			gpus += nodeGPUs(ni.Node, resourcesFromList(ni.Node.Status.Allocatable))
		}
	}
	return nodes, gpus
}

// scaleUp is the state of one ScaleUp call.
type scaleUp struct {
	w            *world
	snapshot     *Snapshot
	pools        []Pool
	tmpls        []*poolTemplate
	now          time.Time
	expander     Expander
	added        []int
	addedNodes   int
	addedGPUs    int64
	clusterNodes int
	clusterGPUs  int64
}

// room returns how many nodes pool i may still add and, when that is 0,
// why.
func (su *scaleUp) room(i int) (int, string) {
	p := &su.pools[i]
	t := su.tmpls[i]
	if t == nil {
		return 0, reasonNoTemplate
	}
	if su.now.Before(p.BackoffUntil) {
		return 0, reasonBackoff
	}
	return capacityRoom(p, t, su.added[i], su.snapshot.Limits,
		su.clusterNodes+su.addedNodes, su.clusterGPUs+su.addedGPUs)
}

// capacityRoom is the number of nodes a pool may add given MaxSize and the
// cluster limits, and the binding limit's reason when it is 0.
func capacityRoom(p *Pool, t *poolTemplate, added int, lim Limits, nodes int, gpus int64) (int, string) {
	room, reason := p.MaxSize-p.Current-p.Upcoming-added, reasonMaxSize
	if lim.MaxNodes > 0 {
		if r := lim.MaxNodes - nodes; r < room {
			room, reason = r, reasonMaxNodes
		}
	}
	if lim.MaxGPUs > 0 && t.gpus > 0 {
		if r := capInt((int64(lim.MaxGPUs) - gpus) / t.gpus); r < room {
			room, reason = r, reasonMaxGPUs
		}
	}
	if room <= 0 {
		return 0, reason
	}
	return room, reason
}

// option is one pool's simulated growth.
type option struct {
	pool   int
	nodes  []*simNode
	placed []*podInfo // copies on the new nodes
	pods   []*podInfo // the pending pods helped
	// waste figures for least-waste
	gpuWaste, cpuMemWaste float64
}

// grow runs rounds of pool simulation and expander choice.
func (su *scaleUp) grow(remaining []*podInfo, plan *ScaleUpPlan) {
	if len(remaining) == 0 {
		return
	}
	if len(su.pools) == 0 {
		for _, pi := range remaining {
			plan.NotTriggerScaleUp = append(plan.NotTriggerScaleUp, PodReason{Pod: pi.pod, Reason: reasonNoPools})
		}
		return
	}
	increases := map[int]int{} // pool → index in plan.Increases
	for len(remaining) > 0 {
		// reasons[k][pool] for remaining[k], from this round.
		reasons := make([]map[string][]string, len(remaining))
		for k := range reasons {
			reasons[k] = make(map[string][]string, len(su.pools))
		}
		index := make(map[*podInfo]int, len(remaining))
		for k, pi := range remaining {
			index[pi] = k
		}
		rooms := make([]int, len(su.pools))
		roomReasons := make([]string, len(su.pools))
		static := make([][][]string, len(su.pools))
		for i := range su.pools {
			rooms[i], roomReasons[i] = su.room(i)
			static[i] = su.staticFits(i, remaining)
		}
		// cpuPoolFits[k]: an eligible non-GPU pool fits the GPU-less pod k.
		cpuPoolFits := make([]bool, len(remaining))
		for k, pi := range remaining {
			if pi.gpu > 0 {
				continue
			}
			for i := range su.pools {
				if su.tmpls[i] != nil && !su.tmpls[i].gpu && rooms[i] > 0 && static[i][k] == nil {
					cpuPoolFits[k] = true
					break
				}
			}
		}
		var options []*option
		for i := range su.pools {
			if su.tmpls[i] == nil {
				continue
			}
			name := su.pools[i].Name
			var try []*podInfo
			for k, pi := range remaining {
				switch {
				case static[i][k] != nil:
					reasons[k][name] = static[i][k]
				case rooms[i] == 0:
					reasons[k][name] = []string{roomReasons[i]}
				case su.tmpls[i].gpu && pi.gpu == 0 && cpuPoolFits[k]:
					reasons[k][name] = []string{reasonGPUPoolForCPU}
				default:
					try = append(try, pi)
				}
			}
			if len(try) == 0 {
				continue
			}
			opt, failed := su.simulate(i, try, rooms[i], roomReasons[i], su.added[i]+su.pools[i].Upcoming)
			for pi, r := range failed {
				reasons[index[pi]][name] = r
			}
			if opt != nil {
				options = append(options, opt)
			}
		}
		if len(options) == 0 {
			for k, pi := range remaining {
				plan.NotTriggerScaleUp = append(plan.NotTriggerScaleUp, podReason(pi, reasons[k]))
			}
			return
		}
		best := su.choose(options)
		su.commit(best)
		i := best.pool
		if idx, ok := increases[i]; ok {
			inc := &plan.Increases[idx]
			inc.Delta += len(best.nodes)
			inc.NewSize += len(best.nodes)
			inc.Pods = append(inc.Pods, podsOf(best.pods)...)
		} else {
			increases[i] = len(plan.Increases)
			p := &su.pools[i]
			plan.Increases = append(plan.Increases, PoolIncrease{
				Pool:    p.Name,
				Delta:   len(best.nodes),
				NewSize: p.Current + p.Upcoming + su.added[i],
				Pods:    podsOf(best.pods),
			})
		}
		helped := make(map[*podInfo]bool, len(best.pods))
		for _, pi := range best.pods {
			helped[pi] = true
		}
		next := remaining[:0:0]
		for _, pi := range remaining {
			if !helped[pi] {
				next = append(next, pi)
			}
		}
		remaining = next
	}
}

func podsOf(pis []*podInfo) []*corev1.Pod {
	out := make([]*corev1.Pod, len(pis))
	for i, pi := range pis {
		out[i] = pi.pod
	}
	return out
}

// staticFits returns, per pod, why it cannot go to an empty node of pool i
// (nil when it can, as far as node-local filters tell).
func (su *scaleUp) staticFits(i int, pods []*podInfo) [][]string {
	out := make([][]string, len(pods))
	t := su.tmpls[i]
	if t == nil {
		for k := range out {
			out[k] = []string{reasonNoTemplate}
		}
		return out
	}
	probe := t.newNode("template-" + su.pools[i].Name)
	for k, pi := range pods {
		out[k] = templateReason(pi, probe)
	}
	return out
}

// templateReason is why pi cannot go to the empty node n, considering the
// filters that do not depend on other pods (nil: it can).
func templateReason(pi *podInfo, n *simNode) []string {
	if r := staticReasons(pi, n); r != "" {
		return []string{r}
	}
	if portsConflict(pi, n) {
		return []string{reasonNodePorts}
	}
	return insufficient(pi, n.alloc, n.used)
}

// simulate packs pods into at most limit new nodes of pool i, first-fit
// decreasing. It leaves the world as it found it. It returns the option
// (nil when no pod was placed) and the reasons of the pods not placed.
func (su *scaleUp) simulate(i int, pods []*podInfo, limit int, limitReason string, firstIndex int) (*option, map[*podInfo][]string) {
	w := su.w
	t := su.tmpls[i]
	sorted := sortDecreasing(pods, t.alloc)
	m := w.mark()
	opt := &option{pool: i}
	failed := map[*podInfo][]string{}
	cursors := map[string]*fitCursor{} // the new nodes only gain pods
	for _, pi := range sorted {
		var tc *topoCounts
		if n := w.firstFit(pi, opt.nodes, cursorIn(cursors, pi), &tc); n != nil {
			w.place(pi, n)
			opt.pods = append(opt.pods, pi)
			continue
		}
		if len(opt.nodes) >= limit {
			failed[pi] = []string{limitReason}
			continue
		}
		n := t.newNode(fmt.Sprintf("template-%s-%d", su.pools[i].Name, firstIndex+len(opt.nodes)))
		w.addExtraNode(n)
		if tc != nil {
			tc.addDomain(w, pi, n)
		}
		if rs := w.check(pi, n, tc); len(rs) > 0 {
			w.nodes = w.nodes[:len(w.nodes)-1]
			failed[pi] = rs
			continue
		}
		opt.nodes = append(opt.nodes, n)
		w.place(pi, n)
		opt.pods = append(opt.pods, pi)
	}
	opt.placed = append([]*podInfo(nil), w.placed[m.placed:]...)
	w.reset(m)
	if len(opt.pods) == 0 {
		return nil, failed
	}
	opt.gpuWaste, opt.cpuMemWaste = waste(opt.nodes)
	return opt, failed
}

// commit applies a simulated option to the world.
func (su *scaleUp) commit(o *option) {
	for _, n := range o.nodes {
		su.w.addExtraNode(n)
	}
	su.w.placed = append(su.w.placed, o.placed...)
	su.added[o.pool] += len(o.nodes)
	su.addedNodes += len(o.nodes)
	su.addedGPUs += int64(len(o.nodes)) * su.tmpls[o.pool].gpus
}

// sortDecreasing orders pods for first-fit decreasing: most GPU resources
// first, then by dominant share of the template's cpu and memory.
func sortDecreasing(pods []*podInfo, alloc resources) []*podInfo {
	type keyed struct {
		pi       *podInfo
		dominant float64
	}
	ks := make([]keyed, len(pods))
	for k, pi := range pods {
		d := math.Max(fraction(pi.req.milliCPU, alloc.milliCPU), fraction(pi.req.memory, alloc.memory))
		ks[k] = keyed{pi, d}
	}
	sort.SliceStable(ks, func(a, b int) bool {
		if ks[a].pi.gpu != ks[b].pi.gpu {
			return ks[a].pi.gpu > ks[b].pi.gpu
		}
		return ks[a].dominant > ks[b].dominant
	})
	out := make([]*podInfo, len(pods))
	for k := range ks {
		out[k] = ks[k].pi
	}
	return out
}

// waste returns the unused fraction of GPU resources (mean over the GPU
// resources the nodes have; 0 without GPUs) and of cpu and memory (mean of
// the two) over the given new nodes.
func waste(nodes []*simNode) (gpu, cpuMem float64) {
	var alloc, used resources
	for _, n := range nodes {
		alloc.add(n.alloc, 1)
		used.add(n.used, 1)
	}
	var sum float64
	var cnt int
	for name, a := range alloc.scalar {
		if IsGPUResource(name) && a > 0 {
			sum += 1 - fraction(used.scalar[name], a)
			cnt++
		}
	}
	if cnt > 0 {
		gpu = sum / float64(cnt)
	}
	cpuMem = (2 - fraction(used.milliCPU, alloc.milliCPU) - fraction(used.memory, alloc.memory)) / 2
	return gpu, cpuMem
}

// podReason aggregates per-pool reasons for one pod.
func podReason(pi *podInfo, perPool map[string][]string) PodReason {
	pr := PodReason{Pod: pi.pod, PerPool: make(map[string]string, len(perPool))}
	counts := map[string]int{}
	for pool, rs := range perPool {
		pr.PerPool[pool] = strings.Join(rs, ", ")
		for _, r := range rs {
			counts[r]++
		}
	}
	if len(counts) == 0 {
		pr.Reason = "pod didn't fit any node pool"
		return pr
	}
	keys := sortedKeys(counts)
	sort.SliceStable(keys, func(a, b int) bool { return counts[keys[a]] > counts[keys[b]] })
	parts := make([]string, len(keys))
	for k, r := range keys {
		parts[k] = fmt.Sprintf("%d %s", counts[r], r)
	}
	pr.Reason = "pod didn't fit any node pool: " + strings.Join(parts, ", ")
	return pr
}
