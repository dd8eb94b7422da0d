package decide

import (
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodetemplate"
	"fke.dev/fke/internal/nodeutil"
)

// PoolView couples a Pool with the objects it came from.
type PoolView struct {
	Pool         *fkev1.NodePool
	InstanceType *fkev1.InstanceType
	Desired      int
	// Live are the machines of the pool that are not being deleted.
	Live []*fkev1.Machine
}

// BuildPools turns the autoscaled NodePools into Pools (pure).
// Machines that are not Ready (node missing, not Ready, or GPUs not yet
// allocatable) count as Upcoming; so do machines the pool has yet to create
// (the desired size above the machines that exist), so a scale-up already
// decided is never decided again. desired gives a pool's desired size; nil
// means its spec.replicas.
func BuildPools(pools []*fkev1.NodePool, types map[string]*fkev1.InstanceType, machines []*fkev1.Machine, backoff map[string]time.Time, desired func(*fkev1.NodePool) int) ([]Pool, map[string]*PoolView) {
	if desired == nil {
		desired = (*fkev1.NodePool).DesiredReplicas
	}
	byPool := map[string][]*fkev1.Machine{}
	for _, m := range machines {
		byPool[m.Spec.NodePoolName] = append(byPool[m.Spec.NodePoolName], m)
	}
	var out []Pool
	views := map[string]*PoolView{}
	for _, np := range pools {
		a := np.Spec.Autoscaling
		it := types[np.Spec.InstanceType]
		if a == nil || it == nil || !np.DeletionTimestamp.IsZero() || np.Legacy() {
			continue
		}
		v := &PoolView{Pool: np, InstanceType: it, Desired: desired(np)}
		current, upcoming := 0, 0
		name := np.PoolName()
		for _, m := range byPool[name] {
			if !m.DeletionTimestamp.IsZero() {
				current++
				continue
			}
			v.Live = append(v.Live, m)
			if meta.IsStatusConditionTrue(m.Status.Conditions, fkev1.ConditionReady) {
				current++
			} else {
				upcoming++
			}
		}
		if missing := v.Desired - len(v.Live); missing > 0 {
			upcoming += missing
		}
		views[name] = v
		out = append(out, Pool{
			Name:                          name,
			Template:                      nodetemplate.Build(np, it, "template-"+name),
			MinSize:                       int(a.MinSize),
			MaxSize:                       int(a.MaxSize),
			Current:                       current,
			Upcoming:                      upcoming,
			PricePerHour:                  price(it),
			Priority:                      int(a.Priority),
			BackoffUntil:                  backoff[name],
			ScaleDownUnneededTime:         duration(a.ScaleDownUnneededTime),
			ScaleDownUtilizationThreshold: threshold(a.ScaleDownUtilizationThreshold),
		})
	}
	return out, views
}

// PodGroups are a cluster's pods grouped by node name (tenant.PodIndex
// keeps them so between passes); Unbound are the pods not bound to a node.
type PodGroups struct {
	ByNode  map[string][]*corev1.Pod
	Unbound []*corev1.Pod
}

// GroupPods groups a flat list of pods (pure).
func GroupPods(pods []*corev1.Pod) PodGroups {
	g := PodGroups{ByNode: map[string][]*corev1.Pod{}}
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			g.Unbound = append(g.Unbound, p)
		} else {
			g.ByNode[p.Spec.NodeName] = append(g.ByNode[p.Spec.NodeName], p)
		}
	}
	return g
}

// BuildSnapshot puts each node's pods with it and finds the unschedulable
// pods (pure). A node counts as Ready only when its Machine is Ready (GPUs
// allocatable). Pods bound to nodes not in nodes are left out. The pod
// slices are shared with pods, not copied.
func BuildSnapshot(nodes []*corev1.Node, pods PodGroups, machines []*fkev1.Machine, limits Limits) Snapshot {
	machineByNode := make(map[string]*fkev1.Machine, len(machines))
	for _, m := range machines {
		if m.Status.NodeName != "" {
			machineByNode[m.Status.NodeName] = m
		}
	}
	s := Snapshot{Limits: limits, Nodes: make([]NodeInfo, 0, len(nodes))}
	for _, p := range pods.Unbound {
		if Unschedulable(p) {
			s.Pending = append(s.Pending, p)
		}
	}
	for _, n := range nodes {
		on := pods.ByNode[n.Name]
		// Capped: the decision code may append to a node's pods without
		// writing into the shared array.
		ni := NodeInfo{Node: n, Pool: n.Labels[fkev1.LabelNodePool], Pods: on[:len(on):len(on)]}
		if m, ok := machineByNode[n.Name]; ok {
			ni.Ready = meta.IsStatusConditionTrue(m.Status.Conditions, fkev1.ConditionReady) && m.DeletionTimestamp.IsZero()
			if ni.Ready {
				ni.Starting = hasStartupTaint(n)
				ni.Node = withoutStartupTaints(n)
			}
			ni.Deleting = !m.DeletionTimestamp.IsZero() || m.Annotations[fkev1.AnnotationScaleDown] == "true"
		} else {
			ni.Ready = nodeutil.NodeReady(n)
			ni.Pool = "" // not ours: never scaled down
		}
		s.Nodes = append(s.Nodes, ni)
	}
	return s
}

// StartingNodes returns the nodes, among those placements put pods on, that
// still carry a startup taint (pure): their machines are Ready, so the
// simulation counts them as capacity, but kube-scheduler cannot use them
// until kube-controller-manager removes the taint. A pod placed there waits
// for a node that is coming up.
func StartingNodes(nodes []*corev1.Node, placements []PodPlacement) map[string]bool {
	wanted := map[string]bool{}
	for _, pl := range placements {
		if !pl.Upcoming {
			wanted[pl.Node] = true
		}
	}
	if len(wanted) == 0 {
		return nil
	}
	starting := map[string]bool{}
	for _, n := range nodes {
		if wanted[n.Name] && hasStartupTaint(n) {
			starting[n.Name] = true
		}
	}
	return starting
}

func hasStartupTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, isStartupTaint)
}

// isStartupTaint reports whether t is one of the taints a node carries
// until kube-controller-manager sees it Ready and reachable.
func isStartupTaint(t corev1.Taint) bool {
	return t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable
}

// withoutStartupTaints drops the not-ready and unreachable taints that
// kube-controller-manager removes shortly after a node turns Ready: a ready
// machine's node is capacity now, not a reason to grow the pool again.
func withoutStartupTaints(n *corev1.Node) *corev1.Node {
	if !hasStartupTaint(n) {
		return n
	}
	keep := slices.DeleteFunc(slices.Clone(n.Spec.Taints), isStartupTaint)
	// A shallow copy: the decision code only reads nodes, and the labels,
	// status and the rest stay shared with the informer's object.
	c := *n
	c.Spec.Taints = keep
	return &c
}

// Unschedulable reports whether kube-scheduler gave up on the pod for now.
func Unschedulable(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || len(p.Spec.SchedulingGates) > 0 {
		return false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// UnschedulableSince returns when the pod was found unschedulable.
func UnschedulableSince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.LastTransitionTime.Time
		}
	}
	return p.CreationTimestamp.Time
}

func price(it *fkev1.InstanceType) float64 {
	p, err := strconv.ParseFloat(it.Spec.PricePerHour, 64)
	if err != nil {
		return 0
	}
	return p
}

func duration(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}

func threshold(s string) float64 {
	if s == "" {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	if v == 0 {
		return -1 // "0" disables the utilization rule (decide treats 0 as the default)
	}
	return v
}

// WithPlacements returns s with each pending pod that fits a registered
// node now counted on that node, as Cluster Autoscaler does before it looks
// for unneeded nodes: a node that kube-scheduler is about to fill is not
// idle. s itself is not modified.
func WithPlacements(s Snapshot, placements []PodPlacement) Snapshot {
	index := make(map[string]int, len(s.Nodes))
	for i := range s.Nodes {
		index[s.Nodes[i].Node.Name] = i
	}
	nodes := append([]NodeInfo(nil), s.Nodes...)
	for _, pl := range placements {
		if i, ok := index[pl.Node]; ok && !pl.Upcoming {
			nodes[i].Pods = append(nodes[i].Pods[:len(nodes[i].Pods):len(nodes[i].Pods)], pl.Pod)
		}
	}
	s.Nodes = nodes
	return s
}
