package deviceplugin

import (
	"fmt"
	"sort"

	gpuconfig "fke.dev/fke/internal/gpu/config"
)

// Request is one container's preferred-allocation request.
type Request struct {
	Available   []string
	MustInclude []string
	Size        int
}

// Preferred chooses Size device IDs from Available (always keeping
// MustInclude) under the policy:
//
//   - packed: as few physical GPUs as possible (replicas of one GPU together,
//     busiest GPUs first so whole GPUs stay free), then the best-connected set;
//   - spread: as many physical GPUs as possible (two shared replicas land on
//     two GPUs), least-busy GPUs first, then the best-connected set.
//
// "Best-connected" scores each pair of chosen GPUs 2 for an NVLink and 1 for
// a shared NUMA node. Every possible first GPU is tried and the best result
// kept, so the choice does not depend on the order of Available. Ties go to
// lower GPU indices. Unknown IDs in Available are skipped; an unknown
// MustInclude ID is an error. It returns fewer than Size IDs only when
// Available has fewer.
func Preferred(policy gpuconfig.AllocationPolicy, devices map[string]Device, topo Topology, req Request) ([]string, error) {
	if policy != gpuconfig.AllocationPacked && policy != gpuconfig.AllocationSpread {
		return nil, fmt.Errorf("unknown allocation policy %q", policy)
	}
	chosen := make([]Device, 0, req.Size)
	taken := map[string]bool{}
	for _, id := range req.MustInclude {
		d, ok := devices[id]
		if !ok {
			return nil, fmt.Errorf("must-include device %q is not advertised by this plugin", id)
		}
		if !taken[id] {
			chosen = append(chosen, d)
			taken[id] = true
		}
	}
	if len(chosen) >= req.Size {
		return ids(chosen[:max(req.Size, 0)]), nil
	}
	var pool []Device
	for _, id := range req.Available {
		if d, ok := devices[id]; ok && !taken[id] {
			pool = append(pool, d)
			taken[id] = true
		}
	}
	sort.Slice(pool, func(i, j int) bool { return less(pool[i], pool[j]) })
	need := req.Size - len(chosen)
	if need >= len(pool) {
		return ids(append(chosen, pool...)), nil
	}

	// Try every GPU in the pool as the first pick; keep the best outcome.
	free := map[int]int{}
	for _, d := range pool {
		free[d.GPUIndex]++
	}
	var best []Device
	var bestScore [3]int
	seen := map[int]bool{}
	for _, seed := range pool {
		if seen[seed.GPUIndex] {
			continue
		}
		seen[seed.GPUIndex] = true
		got := greedy(policy, topo, chosen, pool, need, seed.GPUIndex)
		s := score(policy, topo, free, got)
		if best == nil || greater(s[:], bestScore[:]) {
			best, bestScore = got, s
		}
	}
	return ids(best), nil
}

// greedy picks need devices from pool after chosen, starting on GPU seed.
func greedy(policy gpuconfig.AllocationPolicy, topo Topology, chosen, pool []Device, need, seed int) []Device {
	out := append([]Device(nil), chosen...)
	used := map[string]bool{}
	onGPU := map[int]int{} // chosen devices per GPU
	for _, d := range out {
		onGPU[d.GPUIndex]++
	}
	free := map[int]int{} // pool devices per GPU
	for _, d := range pool {
		free[d.GPUIndex]++
	}
	first := true
	for need > 0 {
		var pick *Device
		var pickKey []int
		for i := range pool {
			d := &pool[i]
			if used[d.ID] {
				continue
			}
			if first && d.GPUIndex != seed {
				continue
			}
			key := candidateKey(policy, topo, onGPU, free, d)
			if pick == nil || greater(key, pickKey) {
				pick, pickKey = d, key
			}
		}
		if pick == nil {
			if first {
				first = false
				continue
			}
			break
		}
		first = false
		used[pick.ID] = true
		out = append(out, *pick)
		onGPU[pick.GPUIndex]++
		free[pick.GPUIndex]--
		need--
	}
	return out
}

// candidateKey ranks a candidate; larger is better, compared element-wise.
// Pool order (ascending GPU index, replica) breaks remaining ties because
// only a strictly greater key replaces the current pick.
func candidateKey(policy gpuconfig.AllocationPolicy, topo Topology, onGPU, free map[int]int, d *Device) []int {
	link := 0
	for g, n := range onGPU {
		if n > 0 && g != d.GPUIndex {
			link += pairScore(topo, g, d.GPUIndex)
		}
	}
	if policy == gpuconfig.AllocationPacked {
		together := 0
		if onGPU[d.GPUIndex] > 0 {
			together = 1
		}
		return []int{together, link, -free[d.GPUIndex]}
	}
	return []int{-onGPU[d.GPUIndex], link, free[d.GPUIndex]}
}

// score rates a whole choice, larger is better: [GPU count (fewer for
// packed, more for spread), connectivity, load (busier GPUs for packed,
// idler ones for spread)].
func score(policy gpuconfig.AllocationPolicy, topo Topology, free map[int]int, ds []Device) [3]int {
	gpus := map[int]bool{}
	for _, d := range ds {
		gpus[d.GPUIndex] = true
	}
	list := make([]int, 0, len(gpus))
	for g := range gpus {
		list = append(list, g)
	}
	conn, load := 0, 0
	for _, g := range list {
		load += free[g]
	}
	for i := range list {
		for j := i + 1; j < len(list); j++ {
			conn += pairScore(topo, list[i], list[j])
		}
	}
	if policy == gpuconfig.AllocationPacked {
		return [3]int{-len(gpus), conn, -load}
	}
	return [3]int{len(gpus), conn, load}
}

func pairScore(topo Topology, a, b int) int {
	s := 0
	if topo.NVLink[a][b] || topo.NVLink[b][a] {
		s += 2
	}
	na, oka := topo.NUMA[a]
	nb, okb := topo.NUMA[b]
	if oka && okb && na >= 0 && na == nb {
		s++
	}
	return s
}

func greater(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return false
}

func less(a, b Device) bool {
	if a.GPUIndex != b.GPUIndex {
		return a.GPUIndex < b.GPUIndex
	}
	if a.Replica != b.Replica {
		return a.Replica < b.Replica
	}
	return a.ID < b.ID
}

func ids(ds []Device) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}
