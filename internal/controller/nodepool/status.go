package nodepool

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodetemplate"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/internal/tenant"
)

// usage is what runs on one node.
type usage struct {
	pods        int // pods that would have to move
	gpus        int64
	utilization float64
}

// nodeUsage reads, from the tenant cache and its pod index, the pods on
// each machine's node (without copies: they are only read) and computes
// their usage (see usages).
func nodeUsage(ctx context.Context, t *tenant.Tenant, machines []*fkev1.Machine, memo map[string]usageEntry) (map[string]usage, map[string]usageEntry, error) {
	nodes, err := t.Nodes(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	byName := make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	out, next := usages(byName, t.PodIndex.OnNode, machines, memo)
	return out, next, nil
}

// usages returns the usage of each machine's node, and the memo for next
// time (pure). A node's usage is computed again only when its Node object
// or the version of its pods changed since memo was made; nil memo
// computes all.
func usages(nodes map[string]*corev1.Node, podsOn func(node string) ([]*corev1.Pod, uint64), machines []*fkev1.Machine, memo map[string]usageEntry) (map[string]usage, map[string]usageEntry) {
	out := make(map[string]usage, len(machines))
	next := make(map[string]usageEntry, len(machines))
	for _, m := range machines {
		node := nodes[m.Status.NodeName]
		if node == nil {
			continue
		}
		pods, version := podsOn(node.Name)
		e, ok := memo[node.Name]
		if !ok || e.node != node || e.version != version {
			e = usageEntry{node: node, version: version, usage: Usage(node, pods)}
		}
		out[node.Name], next[node.Name] = e.usage, e
	}
	return out, next
}

// usageEntry is a node's usage with what it was computed from: the cache's
// Node object and the version of its pods in the pod index.
type usageEntry struct {
	node    *corev1.Node
	version uint64
	usage   usage
}

// Usage computes a node's usage from its pods (pure).
func Usage(node *corev1.Node, pods []*corev1.Pod) usage {
	var u usage
	var cpu, mem int64
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if nodeutil.NeedsEviction(p) {
			u.pods++
		}
		for _, c := range p.Spec.Containers {
			cpu += c.Resources.Requests.Cpu().MilliValue()
			mem += c.Resources.Requests.Memory().Value()
			if q, ok := c.Resources.Limits[nodetemplate.ResourceGPU]; ok {
				u.gpus += q.Value()
			} else if q, ok := c.Resources.Requests[nodetemplate.ResourceGPU]; ok {
				u.gpus += q.Value()
			}
		}
	}
	alloc := node.Status.Allocatable
	frac := func(used, total int64) float64 {
		if total <= 0 {
			return 0
		}
		return float64(used) / float64(total)
	}
	u.utilization = max(frac(cpu, alloc.Cpu().MilliValue()), frac(mem, alloc.Memory().Value()))
	if g, ok := alloc[nodetemplate.ResourceGPU]; ok {
		u.utilization = max(u.utilization, frac(u.gpus, g.Value()))
	}
	return u
}

// computeStatus fills replicas, readiness, GPU capacity and allocation, and conditions.
func computeStatus(np *fkev1.NodePool, machines []*fkev1.Machine, use map[string]usage, plan Plan, desired int) {
	var replicas, ready int32
	var capacity, allocated int64
	for _, m := range machines {
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		replicas++
		if meta.IsStatusConditionTrue(m.Status.Conditions, fkev1.ConditionReady) {
			ready++
		}
		capacity += m.Status.GPUAllocatable
		allocated += use[m.Status.NodeName].gpus
	}
	np.Status.Replicas, np.Status.ReadyReplicas = replicas, ready
	np.Status.GPUCapacity, np.Status.GPUAllocated = capacity, allocated
	switch {
	case plan.Rolling:
		setCondition(np, metav1.ConditionFalse, "RollingUpdate", fmt.Sprintf("replacing nodes: %d of %d ready", ready, desired))
	case int(ready) == desired && int(replicas) == desired:
		setCondition(np, metav1.ConditionTrue, fkev1.ReasonReady, fmt.Sprintf("%d of %d nodes ready", ready, desired))
	default:
		setCondition(np, metav1.ConditionFalse, fkev1.ReasonScaling, fmt.Sprintf("%d of %d nodes ready (%d machines)", ready, desired, replicas))
	}
}
