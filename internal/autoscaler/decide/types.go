// Package decide holds the pure decision code of fke's node autoscaler: which
// node pools grow for unschedulable pods, which nodes are unneeded and may be
// removed, and the scheduling predicate both rely on.
//
// Everything here is a function of its arguments: plain structs in, decisions
// out, the current time passed in. There are no clients, goroutines or
// logging, and the only state that outlives a call is the caller's optional
// Memo of parsed pods, which never changes a result; the autoscaler controller gathers a
// Snapshot and the pools, calls ScaleUp / ScaleDown, and acts on the plans.
//
// Semantics follow Cluster Autoscaler on node groups (fke calls them node
// pools), with GPU-specific rules:
//
//   - machines that exist but whose GPUs are not allocatable yet are counted as
//     Upcoming and simulated from the pool template, so a node that is Ready
//     before its device plugin registers never causes a duplicate scale-up;
//   - a pod that requests no GPU never grows a GPU pool while a non-GPU pool
//     could take it;
//   - a GPU node none of whose GPUs is allocated is unneeded even when CPU-only
//     pods keep its CPU busy (those pods are moved elsewhere), and DaemonSet
//     pods (device plugin, exporters) never keep a node alive.
package decide

import (
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Defaults applied when a Pool leaves the corresponding field zero.
const (
	DefaultScaleDownUnneededTime         = 10 * time.Minute
	DefaultScaleDownUtilizationThreshold = 0.5
	// DefaultTemplatePods is the pod capacity assumed for a template node
	// whose allocatable does not list "pods" (kubelet's default max-pods).
	DefaultTemplatePods = 110
)

// Annotations and labels read by the decision code.
const (
	// AnnotationDoNotDisrupt on a pod or a node ("true") keeps the node from
	// being scaled down.
	AnnotationDoNotDisrupt = "fke.dev/do-not-disrupt"
	// AnnotationSafeToEvict is Cluster Autoscaler's pod annotation: "false"
	// blocks scale-down like do-not-disrupt; "true" lets a bare pod, a pod
	// with local storage or a kube-system pod without a PDB be moved.
	AnnotationSafeToEvict = "cluster-autoscaler.kubernetes.io/safe-to-evict"
	// AnnotationScaleDownDisabled is Cluster Autoscaler's node annotation
	// ("true") that excludes a node from scale-down.
	AnnotationScaleDownDisabled = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
	// AnnotationTemplateGPUCount is the Cluster API spelling of a template's
	// physical GPU count, read when the template has no
	// "nvidia.com/gpu.count" label.
	AnnotationTemplateGPUCount = "capacity.cluster-autoscaler.kubernetes.io/gpu-count"
	// LabelGPUCount and LabelGPUReplicas are the GPU Feature Discovery labels
	// used to count physical GPUs (time-sliced nodes advertise
	// count×replicas "nvidia.com/gpu").
	LabelGPUCount    = "nvidia.com/gpu.count"
	LabelGPUReplicas = "nvidia.com/gpu.replicas"
)

// Pool is one autoscaled node pool as the decision code sees it.
type Pool struct {
	// Name identifies the pool; NodeInfo.Pool refers to it.
	Name string
	// Template is a new node of the pool as it will look once its GPUs are
	// allocatable: status.allocatable (including nvidia.com/gpu, MIG or
	// time-sliced resource names), labels (zone, instance type, GPU Feature
	// Discovery labels; the hostname is replaced per simulated node) and
	// spec.taints. Start-up taints (not-ready, unreachable, uninitialized) are
	// ignored. A pool without a template never grows.
	Template *corev1.Node
	// MinSize and MaxSize bound the number of machines.
	MinSize, MaxSize int
	// Current is the number of machines that exist and are registered,
	// including machines being deleted. Machines counted in Upcoming are not
	// counted here.
	Current int
	// Upcoming is the number of machines created but not yet ready with their
	// GPUs allocatable. They are simulated as template nodes; the controller
	// must report their Node objects, if any, with Ready=false.
	Upcoming int
	// PricePerHour is the price of one node; 0 means unknown (the price
	// expander ranks such pools after priced ones).
	PricePerHour float64
	// Priority ranks pools for the priority expander; higher wins.
	Priority int
	// BackoffUntil: the pool is not grown before this time (a recent
	// scale-up failed).
	BackoffUntil time.Time
	// ScaleDownUnneededTime is how long a node must stay unneeded before it is
	// removed; 0 means DefaultScaleDownUnneededTime.
	ScaleDownUnneededTime time.Duration
	// ScaleDownUtilizationThreshold: a node whose utilization (the largest
	// requested fraction of allocatable cpu, memory and GPU resources) is
	// below it is a scale-down candidate. 0 means
	// DefaultScaleDownUtilizationThreshold; a negative value disables the
	// utilization rule (the idle-GPU rule still applies).
	ScaleDownUtilizationThreshold float64
	// DaemonSetOverhead is what DaemonSet pods take on every node of the
	// pool; it is subtracted from the template's allocatable (it may include
	// "pods").
	DaemonSetOverhead corev1.ResourceList
}

// Limits are cluster-wide caps on what scale-up may create; 0 means no limit.
type Limits struct {
	// MaxNodes caps the number of nodes in the cluster.
	MaxNodes int
	// MaxGPUs caps the number of physical GPUs in the cluster.
	MaxGPUs int
}

// NodeInfo is one registered node with the pods bound to it.
type NodeInfo struct {
	Node *corev1.Node
	// Pool is the name of the node's pool; "" or an unknown name means the
	// node belongs to no autoscaled pool (it can host pods but is never
	// scaled down).
	Pool string
	// Ready reports whether pods can be scheduled to the node now. A node
	// whose GPUs are not allocatable yet must be reported not Ready and its
	// machine counted in Pool.Upcoming.
	Ready bool
	// Deleting reports whether the node is being removed; it hosts nothing
	// in simulations.
	Deleting bool
	// Starting reports a Ready node that still carries kube-controller-
	// manager's start-up taints (not-ready, unreachable): capacity for
	// scale-up decisions, but kube-scheduler places nothing there yet.
	Starting bool
	// Pods bound to the node, DaemonSet and mirror pods included. While a
	// Memo is used, a slice is not changed in place: pods that change come
	// in a new slice (as tenant.PodIndex gives them).
	Pods []*corev1.Pod
}

// Schedulable returns a copy of s in which the Starting nodes are not
// Ready: the capacity kube-scheduler can use at this moment.
func (s Snapshot) Schedulable() Snapshot {
	out := s
	out.Nodes = make([]NodeInfo, len(s.Nodes))
	for i, n := range s.Nodes {
		if n.Starting {
			n.Ready = false
		}
		out.Nodes[i] = n
	}
	return out
}

// Snapshot is the cluster state a decision is made on.
type Snapshot struct {
	Nodes []NodeInfo
	// Pending are the unschedulable pods (PodScheduled=False, reason
	// Unschedulable), in any order.
	Pending []*corev1.Pod
	PDBs    []policyv1.PodDisruptionBudget
	Limits  Limits
	// Namespaces maps a namespace name to its labels, for pod affinity
	// terms with a namespaceSelector. Optional: a namespace missing here is
	// taken to carry only "kubernetes.io/metadata.name".
	Namespaces map[string]map[string]string
	// Booked are pods whose capacity is reserved but not yet used: the
	// pods of ProvisioningRequests that are Provisioned and whose booking
	// has not expired, less the pods that already consume them. They are
	// placed on ready nodes before anything else, so pending pods do not
	// take that room and the nodes holding it are not scaled down. Each
	// carries the consume-provisioning-request annotation naming its request.
	Booked []*corev1.Pod
	// LeavingOwners maps the UID of a controller (a ReplicaSet, Job, ...)
	// whose pods the garbage collector is about to delete to the time it
	// started leaving: it was deleted, or is being deleted without
	// orphaning its dependents, or its own controller is (a deleted
	// Deployment's ReplicaSet). Scale-up counts a pod whose controller is
	// listed as terminating from that time (LeavingDeadline): the room of
	// a bound one will be freed, and a pending one triggers nothing. A
	// controller that is orphaning its dependents must not be listed.
	// Optional: without it only pods already terminating count.
	LeavingOwners map[types.UID]time.Time
	// AwaitingOwners maps the UID of a pending pod to the time until which
	// it waits for the caller to see its controllers. The controllers are
	// watched apart from the pods (that watch fills LeavingOwners) and may
	// be seen later: a pod of a Deployment deleted and created again can
	// be pending before the deletion of the old one is known, and its
	// pods' room would look taken for good. Until that time such a pod
	// takes room that is free, coming up or being freed as any pod does,
	// but grows no pool (ScaleUpPlan.AwaitingOwners). Optional.
	AwaitingOwners map[types.UID]time.Time
	// Memo, optional, keeps parsed bound pods between calls (see Memo); it
	// makes repeated calls on a large, slowly changing cluster cheaper and
	// never changes their result.
	Memo *Memo
}

// ExpanderName names a strategy for choosing among pools that could grow.
type ExpanderName string

const (
	// ExpanderLeastWaste (the default) picks the option whose new nodes
	// leave the smallest unused fraction of GPUs, then of cpu and memory.
	ExpanderLeastWaste ExpanderName = "least-waste"
	// ExpanderPrice picks the option with the lowest price per pod it
	// schedules (node count × PricePerHour ÷ pods), so at equal cost the
	// option scheduling more pods wins; ties go to least-waste.
	ExpanderPrice ExpanderName = "price"
	// ExpanderPriority picks the pool with the highest Priority; ties go to
	// least-waste.
	ExpanderPriority ExpanderName = "priority"
	// ExpanderRandom picks uniformly at random using Expander.Rand.
	ExpanderRandom ExpanderName = "random"
)

// Expander selects the strategy ScaleUp uses to pick among options.
type Expander struct {
	// Name is the strategy; "" means ExpanderLeastWaste.
	Name ExpanderName
	// Rand is the source for ExpanderRandom; nil means a source seeded from
	// the now argument, so a call stays a pure function of its inputs.
	Rand *rand.Rand
}

// PodPlacement is a pending pod that fits on capacity that exists or is
// already coming, so it triggers no scale-up.
type PodPlacement struct {
	Pod *corev1.Pod
	// Node is the node it fits on; for an upcoming machine a synthetic name
	// "upcoming-<pool>-<i>".
	Node string
	// Pool is the node's pool ("" for a node of no autoscaled pool).
	Pool string
	// Upcoming is true when the node is an upcoming machine of a pool.
	Upcoming bool
	// AwaitsTermination is true when the pod fits the node only once pods
	// terminating or leaving there are gone (before their deadline, see
	// LeavingDeadline).
	AwaitsTermination bool
}

// PodReason explains why a pod triggers no scale-up.
type PodReason struct {
	Pod *corev1.Pod
	// Reason aggregates the per-pool reasons the way kube-scheduler
	// aggregates per-node ones, e.g. "pod didn't fit any node pool: 2
	// Insufficient nvidia.com/gpu, 1 max size reached".
	Reason string
	// PerPool holds each pool's reason, keyed by pool name.
	PerPool map[string]string
}

// PoolIncrease is one pool growing in a ScaleUpPlan.
type PoolIncrease struct {
	Pool string
	// Delta is the number of machines to create.
	Delta int
	// NewSize is Current + Upcoming + Delta: the size to request.
	NewSize int
	// Pods are the pending pods the new machines are for.
	Pods []*corev1.Pod
}

// ScaleUpPlan is the outcome of ScaleUp.
type ScaleUpPlan struct {
	// Increases lists the pools to grow, in the order they were chosen.
	Increases []PoolIncrease
	// Schedulable lists pending pods that fit existing free capacity,
	// upcoming machines or the room terminating pods will free.
	Schedulable []PodPlacement
	// RecheckAt, when not zero, is the earliest deadline of the terminating
	// pods whose room a placement relies on (from then on those pods hold
	// their room again) or of the waits of AwaitingOwners: from then on a
	// new decision may grow a pool.
	RecheckAt time.Time
	// AwaitingOwners lists the pending pods that fit no room and wait for
	// their controllers to be seen (Snapshot.AwaitingOwners): they grow no
	// pool yet.
	AwaitingOwners []*corev1.Pod
	// NotTriggerScaleUp lists pending pods no pool can help, with why.
	NotTriggerScaleUp []PodReason
	// Warnings report inputs that were ignored or defaulted (an unknown
	// expander, a pool without a template, an invalid selector).
	Warnings []string
}

// NodeRemoval is a node ScaleDown decided to remove now.
type NodeRemoval struct {
	Node string
	Pool string
	// UnneededSince is when the node was first seen unneeded.
	UnneededSince time.Time
	// Reason says why the node is unneeded, e.g. "no GPU allocated" or
	// "utilization 0.21 below threshold 0.50".
	Reason string
	// Evict lists the pods that must move (DaemonSet, mirror and finished
	// pods excluded); the simulation found room for all of them elsewhere.
	Evict []*corev1.Pod
}

// ScaleDownPlan is the outcome of ScaleDown.
type ScaleDownPlan struct {
	// UnneededSince is the new unneeded map, to pass to the next call: nodes
	// still unneeded keep their time, new ones get now, others are dropped.
	UnneededSince map[string]time.Time
	// Remove lists the nodes to remove now.
	Remove []NodeRemoval
	// Kept gives, for every other node considered, why it stays.
	Kept map[string]string
}
