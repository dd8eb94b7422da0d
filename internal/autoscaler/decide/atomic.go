package decide

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// AtomicScaleUp is the outcome of ScaleUpAtomic.
type AtomicScaleUp struct {
	// Nodes is the number of new nodes the gang needs (0 when some pod fits
	// no node of the pool).
	Nodes int
	// OK: the pool may add them now.
	OK bool
	// Reason says why not, e.g. "max size of pool gpu reached: need 4, 3
	// allowed".
	Reason string
	// Retry: the gang could fit later without any change to it or to the
	// pool's settings (the pool is backing off, or its max size or a cluster
	// limit is taken by nodes that exist now). False when it never can: a
	// pod fits no node of the pool, or the gang needs more nodes than the
	// pool's max size or the cluster limits allow at all.
	Retry bool
}

// ScaleUpAtomic decides an all-or-nothing scale-up for a gang of pods (a
// ProvisioningRequest of class best-effort-atomic-scale-up): how many new
// nodes of pool all pods need together, packed first-fit decreasing onto new
// template nodes only (existing and upcoming capacity is left to other
// pods). It is OK only if every pod fits a new node and the count is within
// MaxSize-(Current+Upcoming) and the cluster limits.
//
// Cluster limits count pool's Current+Upcoming from its template and every
// other registered node from the snapshot.
func ScaleUpAtomic(s Snapshot, pool Pool, pods []*corev1.Pod, now time.Time) AtomicScaleUp {
	t := newPoolTemplate(&pool)
	if t == nil {
		return AtomicScaleUp{Reason: fmt.Sprintf("pool %s has no template", pool.Name)}
	}
	if now.Before(pool.BackoffUntil) {
		return AtomicScaleUp{Retry: true, Reason: fmt.Sprintf("pool %s backing off until %s", pool.Name, pool.BackoffUntil.UTC().Format(time.RFC3339))}
	}
	var pis []*podInfo
	for _, p := range pods {
		if p == nil {
			continue
		}
		pi := newPodInfo(p)
		if pi.invalid != "" {
			return AtomicScaleUp{Reason: fmt.Sprintf("pod %s: %s", pi.key(), pi.invalid)}
		}
		pis = append(pis, pi)
	}
	if len(pis) == 0 {
		return AtomicScaleUp{OK: true}
	}
	s.Memo.begin()
	defer s.Memo.end()
	w := newWorld(s.Namespaces, true, s.Memo)
	w.lazy = true
	for i := range s.Nodes {
		ni := &s.Nodes[i]
		if ni.Node != nil && !ni.Deleting {
			w.addSnapshotNode(ni)
		}
	}
	pools := []Pool{pool}
	tmpls := []*poolTemplate{t}
	su := &scaleUp{w: w, snapshot: &s, pools: pools, tmpls: tmpls, now: now, added: []int{0}}
	opt, failed := su.simulate(0, pis, len(pis), reasonMaxSize, pool.Upcoming)
	if len(failed) > 0 {
		for _, pi := range pis { // first failing pod in input order
			if rs, bad := failed[pi]; bad {
				return AtomicScaleUp{Reason: fmt.Sprintf("pod %s didn't fit pool %s: %s", pi.key(), pool.Name, strings.Join(rs, ", "))}
			}
		}
	}
	need := len(opt.nodes)
	if allowed := pool.MaxSize - pool.Current - pool.Upcoming; need > allowed {
		return AtomicScaleUp{Nodes: need, Retry: need <= pool.MaxSize,
			Reason: fmt.Sprintf("max size of pool %s reached: need %d, %d allowed", pool.Name, need, max(allowed, 0))}
	}
	clusterNodes, clusterGPUs := clusterUsage(&s, pools, tmpls)
	if lim := s.Limits.MaxNodes; lim > 0 && need > lim-clusterNodes {
		return AtomicScaleUp{Nodes: need, Retry: need <= lim,
			Reason: fmt.Sprintf("%s: need %d nodes, %d allowed", reasonMaxNodes, need, max(lim-clusterNodes, 0))}
	}
	if lim := int64(s.Limits.MaxGPUs); lim > 0 && t.gpus > 0 && int64(need)*t.gpus > lim-clusterGPUs {
		return AtomicScaleUp{Nodes: need, Retry: int64(need)*t.gpus <= lim,
			Reason: fmt.Sprintf("%s: need %d GPUs, %d allowed", reasonMaxGPUs, int64(need)*t.gpus, max(lim-clusterGPUs, 0))}
	}
	return AtomicScaleUp{Nodes: need, OK: true}
}

// CheckCapacity reports whether all pods fit, together, on the free room of
// ready nodes now (a ProvisioningRequest of class check-capacity), without
// any scale-up. Booked pods hold their room; pending pods of the snapshot
// are not placed first. When
// they do not fit, reason names the first pod that does not and aggregates
// the per-node reasons as kube-scheduler does.
func CheckCapacity(s Snapshot, pods []*corev1.Pod) (ok bool, reason string) {
	s.Memo.begin()
	defer s.Memo.end()
	w := newWorld(s.Namespaces, true, s.Memo)
	w.lazy = true
	for i := range s.Nodes {
		ni := &s.Nodes[i]
		if ni.Node != nil && !ni.Deleting {
			w.addSnapshotNode(ni)
		}
	}
	w.buildIndex()
	w.placeBooked(s.Booked)
	var pis []*podInfo
	for _, p := range pods {
		if p != nil {
			pis = append(pis, newPodInfo(p))
		}
	}
	largestFirst(pis)
	for _, pi := range pis {
		if pi.invalid != "" {
			return false, fmt.Sprintf("pod %s: %s", pi.key(), pi.invalid)
		}
		if n := w.findNode(pi); n != nil {
			w.place(pi, n)
			continue
		}
		return false, fmt.Sprintf("pod %s: %s", pi.key(), w.unschedulableMessage(pi))
	}
	return true, ""
}

// unschedulableMessage is kube-scheduler's "0/N nodes are available: ..."
// for a pod that fits no node.
func (w *world) unschedulableMessage(pi *podInfo) string {
	counts := map[string]int{}
	total := 0
	for _, n := range w.nodes[:w.baseCount] {
		if n.gone {
			continue
		}
		total++
		if !n.target {
			counts["node(s) were not ready"]++
			continue
		}
		for _, r := range w.check(pi, n, nil) {
			counts[r]++
		}
	}
	keys := sortedKeys(counts)
	sort.SliceStable(keys, func(a, b int) bool { return counts[keys[a]] > counts[keys[b]] })
	parts := make([]string, len(keys))
	for k, r := range keys {
		parts[k] = fmt.Sprintf("%d %s", counts[r], r)
	}
	msg := fmt.Sprintf("0/%d nodes are available", total)
	if len(parts) > 0 {
		msg += ": " + strings.Join(parts, ", ")
	}
	return msg + "."
}
