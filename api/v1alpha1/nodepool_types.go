package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ProviderName names a node provider.
// +kubebuilder:validation:Enum=kwok;local
type ProviderName string

const (
	// ProviderKwok makes simulated nodes (kwok) for scale and tests.
	ProviderKwok ProviderName = "kwok"
	// ProviderLocal makes real nodes (kubelet + containerd) on this machine.
	ProviderLocal ProviderName = "local"
)

// NodePoolSpec is the desired state of a group of identical worker nodes.
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || !has(self.replicas) || (self.replicas >= self.autoscaling.minSize && self.replicas <= self.autoscaling.maxSize)",message="replicas must lie within autoscaling minSize..maxSize"
type NodePoolSpec struct {
	// ClusterName is the Cluster (same namespace) the pool's nodes join. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterName is immutable"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="clusterName must be a DNS label"
	ClusterName string `json:"clusterName"`

	// PoolName is the pool's name within its cluster: pools of different
	// clusters may share it. The object is named CLUSTER.POOL
	// (NodePoolObjectName), which keeps names unique per cluster. Nodes
	// carry it in the label fke.dev/nodepool. Required for new pools (a
	// pool made before per-cluster names has none until the manager
	// renames it). Immutable.
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="poolName is immutable"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="poolName must be a DNS label of at most 40 characters: lowercase letters, digits and '-', starting with a letter"
	// +optional
	PoolName string `json:"poolName,omitempty"`

	// Version pins the Kubernetes version of the pool's kubelets. Empty:
	// the pool follows its cluster, and its nodes are replaced (rolling,
	// within spec.upgrade) once the cluster's control plane has been
	// upgraded. A pinned version must be one fke runs, not newer than the
	// cluster's and at most three minors older (checked at admission).
	// +kubebuilder:validation:Pattern=`^v1\.[0-9]+\.[0-9]+$`
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Version string `json:"version,omitempty"`

	// InstanceType names the InstanceType of every node in the pool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	InstanceType string `json:"instanceType"`

	// Provider makes the pool's nodes.
	// +kubebuilder:default=kwok
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="provider is immutable"
	// +optional
	Provider ProviderName `json:"provider,omitempty"`

	// Replicas is the desired number of nodes. With autoscaling, the autoscaler
	// changes it within minSize..maxSize.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=5000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Autoscaling lets the node autoscaler size the pool.
	// +optional
	Autoscaling *NodePoolAutoscaling `json:"autoscaling,omitempty"`

	// Labels are added to every node of the pool: Kubernetes label keys and
	// values. Keys under kubernetes.io/, k8s.io/ and fke.dev/ (and their
	// subdomains, such as node.kubernetes.io/) are set by Kubernetes and fke
	// and refused, except node-restriction.kubernetes.io/, the prefix
	// Kubernetes keeps for labels an administrator sets on nodes, and
	// topology.kubernetes.io/zone and /region, which place a pool. The schema
	// checks keys and value lengths; fke-manager's admission webhook checks
	// the values' characters (too costly for CEL).
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !format.qualifiedName().validate(k).hasValue())",messageExpression="'label key ' + self.filter(k, format.qualifiedName().validate(k).hasValue())[0] + ' is not a valid Kubernetes label key: write [prefix/]name, a DNS subdomain prefix of at most 253 characters and a name of at most 63 alphanumerics, -, _ or ., starting and ending with an alphanumeric'"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.matches('^([a-z0-9.-]*[.])?(kubernetes[.]io|k8s[.]io|fke[.]dev)/') || k.startsWith('node-restriction.kubernetes.io/') || k in ['topology.kubernetes.io/zone', 'topology.kubernetes.io/region'])",messageExpression="'label key ' + self.filter(k, k.matches('^([a-z0-9.-]*[.])?(kubernetes[.]io|k8s[.]io|fke[.]dev)/') && !k.startsWith('node-restriction.kubernetes.io/') && !(k in ['topology.kubernetes.io/zone', 'topology.kubernetes.io/region']))[0] + ' uses a prefix reserved for Kubernetes and fke (kubernetes.io, k8s.io, fke.dev and their subdomains): use a prefix of your own, such as example.com/, or node-restriction.kubernetes.io/ (topology.kubernetes.io/zone and /region are allowed too)'"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].size() <= 63)",messageExpression="'label ' + self.filter(k, self[k].size() > 63)[0] + ': a label value must be at most 63 characters'"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Taints are added to every node of the pool: keys follow the rules of
	// label keys (reserved prefixes included), values those of label values,
	// effects are NoSchedule, PreferNoSchedule or NoExecute, and a key and
	// effect appear once. The schema checks lengths and effects; fke-manager's
	// admission webhook checks the rest (too costly for CEL).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="a taint effect must be NoSchedule, PreferNoSchedule or NoExecute"
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.key.size() <= 317 && (!has(t.value) || t.value.size() <= 63))",message="a taint key must be at most 317 characters (253 of prefix, '/', 63 of name) and a taint value at most 63"
	// +optional
	Taints []corev1.Taint `json:"taints,omitempty"`

	// DisableGPUTaint leaves GPU nodes without the nvidia.com/gpu=present:NoSchedule taint.
	// +optional
	DisableGPUTaint bool `json:"disableGPUTaint,omitempty"`

	// GPU configures how the GPUs of a GPU instance type are offered to pods
	// (fke's GPU agent on each node). Changing it reconfigures the agent on
	// the pool's nodes without replacing them. Ignored for CPU types.
	// +optional
	GPU *NodePoolGPU `json:"gpu,omitempty"`

	// Upgrade bounds how nodes are replaced when the template changes.
	// +kubebuilder:default={}
	// +optional
	Upgrade NodePoolUpgrade `json:"upgrade,omitempty"`

	// Repair replaces the pool's unhealthy nodes: drained, deleted and made
	// again (Cluster API's MachineHealthCheck semantics). On by default.
	// +kubebuilder:default={}
	// +optional
	Repair NodePoolRepair `json:"repair,omitempty"`
}

// NodePoolRepair says when a node counts as unhealthy and how much of the
// pool may be repaired at once.
type NodePoolRepair struct {
	// Disabled turns auto-repair off for the pool.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// NodeUnhealthyTimeout is how long a Node may be NotReady, unreachable
	// or gone before its machine is replaced (default 5m).
	// +optional
	NodeUnhealthyTimeout *metav1.Duration `json:"nodeUnhealthyTimeout,omitempty"`
	// NodeStartupTimeout is how long a new machine's Node may take to
	// register and become Ready (default 10m).
	// +optional
	NodeStartupTimeout *metav1.Duration `json:"nodeStartupTimeout,omitempty"`
	// GPUUnhealthyTimeout is how long a GPU node may have fewer GPUs
	// allocatable than its instance type, or a GPU health monitor that
	// cannot run, before it is replaced (default 10m).
	// +optional
	GPUUnhealthyTimeout *metav1.Duration `json:"gpuUnhealthyTimeout,omitempty"`
	// MaxUnhealthy stops repair while more of the pool's machines than this
	// (a count, or a percentage rounded down but at least one) are unhealthy
	// at once: a fault of the whole fleet is not fixed by replacing every
	// node (default 40%).
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9]+%$')",message="maxUnhealthy must be a count (0 or more) or a percentage such as 40%"
	// +optional
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`
}

// NodePoolGPU is how a pool's GPUs are shared and advertised.
type NodePoolGPU struct {
	// TimeSlicingReplicas advertises each GPU this many times, so that as
	// many pods share it by time-slicing (nvidia.com/gpu.replicas). 1 (the
	// default) shares nothing.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	TimeSlicingReplicas int32 `json:"timeSlicingReplicas,omitempty"`

	// MIGStrategy says how MIG devices are advertised: none (whole GPUs),
	// single (MIG devices as nvidia.com/gpu) or mixed (nvidia.com/mig-<profile>).
	// +kubebuilder:validation:Enum=none;single;mixed
	// +optional
	MIGStrategy string `json:"migStrategy,omitempty"`
}

// NodePoolAutoscaling configures the node autoscaler for one pool.
// +kubebuilder:validation:XValidation:rule="self.minSize <= self.maxSize",message="minSize must be less than or equal to maxSize"
type NodePoolAutoscaling struct {
	// MinSize is the fewest nodes the autoscaler leaves (0 allows scale to zero).
	// +kubebuilder:validation:Minimum=0
	MinSize int32 `json:"minSize"`
	// MaxSize is the most nodes the autoscaler makes.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=5000
	MaxSize int32 `json:"maxSize"`
	// ScaleDownUnneededTime is how long a node must be unneeded before removal.
	// +kubebuilder:default="10m"
	// +optional
	ScaleDownUnneededTime *metav1.Duration `json:"scaleDownUnneededTime,omitempty"`
	// ScaleDownUtilizationThreshold: a node whose requested cpu and memory fall
	// below this fraction of allocatable is a scale-down candidate. A decimal in [0,1].
	// +kubebuilder:default="0.5"
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]+)?|1(\.0+)?)$`
	// +optional
	ScaleDownUtilizationThreshold string `json:"scaleDownUtilizationThreshold,omitempty"`
	// MaxProvisionTime is how long a new node may take to become ready with its
	// GPUs before the pool backs off and another pool is tried.
	// +kubebuilder:default="15m"
	// +optional
	MaxProvisionTime *metav1.Duration `json:"maxProvisionTime,omitempty"`
	// Priority ranks pools for the priority expander (higher wins).
	// +optional
	Priority int32 `json:"priority,omitempty"`
}

// NodePoolUpgrade bounds a rolling replacement of a pool's nodes.
type NodePoolUpgrade struct {
	// MaxSurge is how many nodes may be added above the desired size during a replacement.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +optional
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
	// MaxUnavailable is how many nodes may be unavailable during a replacement.
	// +kubebuilder:default=0
	// +kubebuilder:validation:XIntOrString
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// ScaleDecision records the last sizing decision made for a pool.
type ScaleDecision struct {
	// Time of the decision.
	Time metav1.Time `json:"time"`
	// From and To are the pool's desired sizes before and after.
	From int32 `json:"from"`
	To   int32 `json:"to"`
	// Reason says why, in words.
	Reason string `json:"reason"`
}

// NodePoolStatus is the observed state of a NodePool.
type NodePoolStatus struct {
	// ObservedGeneration is the generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Replicas is the number of Machines of the pool.
	// +optional
	Replicas int32 `json:"replicas"`
	// ReadyReplicas is the number of Machines whose Node is Ready (and GPUs allocatable).
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// DesiredReplicas is the size the pool is heading to.
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`
	// Selector is the label selector of the pool's Machines (for the scale subresource).
	// +optional
	Selector string `json:"selector,omitempty"`
	// GPUCapacity is the number of allocatable GPUs on the pool's nodes.
	// +optional
	GPUCapacity int64 `json:"gpuCapacity"`
	// GPUAllocated is the number of those GPUs requested by running pods.
	// +optional
	GPUAllocated int64 `json:"gpuAllocated"`
	// LastScaleDecision is the most recent change of the desired size.
	// +optional
	LastScaleDecision *ScaleDecision `json:"lastScaleDecision,omitempty"`
	// Conditions: Ready, ScalingActive.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodePool is a group of identical worker nodes of one Cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=np,categories=fke
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolName`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.instanceType`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.spec.autoscaling.minSize`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.autoscaling.maxSize`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.gpuCapacity`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="has(self.spec.poolName) ? self.metadata.name == self.spec.clusterName + '.' + self.spec.poolName : (self.metadata.name.size() <= 40 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$'))",message="a node pool is named CLUSTER.POOL from spec.clusterName and spec.poolName, e.g. demo.gpu for pool gpu of cluster demo (`fke nodepool create demo/gpu` names it so)"
type NodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodePoolSpec   `json:"spec"`
	Status NodePoolStatus `json:"status,omitempty"`
}

// NodePoolList is a list of NodePools.
//
// +kubebuilder:object:root=true
type NodePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodePool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NodePool{}, &NodePoolList{})
}
