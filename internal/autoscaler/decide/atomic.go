package decide

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ScaleUpAtomic decides an all-or-nothing scale-up for a gang of pods (a
// ProvisioningRequest of class best-effort-atomic-scale-up): how many new
// nodes of pool all pods need together, packed first-fit decreasing onto new
// template nodes only (existing and upcoming capacity is left to other
// pods). It is ok only if every pod fits a new node and the count is within
// MaxSize-(Current+Upcoming) and the cluster limits; otherwise nodes is the
// count needed (0 when some pod fits no node of the pool) and reason says
// why, e.g. "max size of pool gpu reached: need 4, 3 allowed".
//
// Cluster limits count pool's Current+Upcoming from its template and every
// other registered node from the snapshot.
func ScaleUpAtomic(s Snapshot, pool Pool, pods []*corev1.Pod, now time.Time) (nodes int, ok bool, reason string) {
	t := newPoolTemplate(&pool)
	if t == nil {
		return 0, false, fmt.Sprintf("pool %s has no template", pool.Name)
	}
	if now.Before(pool.BackoffUntil) {
		return 0, false, fmt.Sprintf("pool %s backing off until %s", pool.Name, pool.BackoffUntil.UTC().Format(time.RFC3339))
	}
	var pis []*podInfo
	for _, p := range pods {
		if p == nil {
			continue
		}
		pi := newPodInfo(p)
		if pi.invalid != "" {
			return 0, false, fmt.Sprintf("pod %s: %s", pi.key(), pi.invalid)
		}
		pis = append(pis, pi)
	}
	if len(pis) == 0 {
		return 0, true, ""
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
				return 0, false, fmt.Sprintf("pod %s didn't fit pool %s: %s", pi.key(), pool.Name, strings.Join(rs, ", "))
			}
		}
	}
	need := len(opt.nodes)
	if allowed := pool.MaxSize - pool.Current - pool.Upcoming; need > allowed {
		return need, false, fmt.Sprintf("max size of pool %s reached: need %d, %d allowed", pool.Name, need, max(allowed, 0))
	}
	clusterNodes, clusterGPUs := clusterUsage(&s, pools, tmpls)
	if lim := s.Limits.MaxNodes; lim > 0 && need > lim-clusterNodes {
		return need, false, fmt.Sprintf("%s: need %d nodes, %d allowed", reasonMaxNodes, need, max(lim-clusterNodes, 0))
	}
	if lim := int64(s.Limits.MaxGPUs); lim > 0 && t.gpus > 0 && int64(need)*t.gpus > lim-clusterGPUs {
		return need, false, fmt.Sprintf("%s: need %d GPUs, %d allowed", reasonMaxGPUs, int64(need)*t.gpus, max(lim-clusterGPUs, 0))
	}
	return need, true, ""
}

// CheckCapacity reports whether all pods fit, together, on the free room of
// ready nodes now (a ProvisioningRequest of class check-capacity), without
// any scale-up. Pending pods of the snapshot are not placed first. When
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
	var pis []*podInfo
	for _, p := range pods {
		if p != nil {
			pis = append(pis, newPodInfo(p))
		}
	}
	// Largest first: GPUs, then cpu, then memory.
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
