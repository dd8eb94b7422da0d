package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MachinePhase is a one-word summary of a Machine's lifecycle.
type MachinePhase string

const (
	MachinePending      MachinePhase = "Pending"
	MachineProvisioning MachinePhase = "Provisioning"
	MachineRunning      MachinePhase = "Running"
	MachineDeleting     MachinePhase = "Deleting"
	MachineFailed       MachinePhase = "Failed"
)

// MachineSpec is the desired state of one worker node. Immutable once created.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="machine spec is immutable; replace the machine instead"
type MachineSpec struct {
	// ClusterName is the Cluster the node joins.
	// +kubebuilder:validation:MinLength=1
	ClusterName string `json:"clusterName"`
	// NodePoolName is the name of its pool within the cluster (the pool's
	// spec.poolName; the NodePool object is CLUSTER.POOL, see NodePoolKey).
	// +kubebuilder:validation:MinLength=1
	NodePoolName string `json:"nodePoolName"`
	// InstanceType is the shape of the node.
	// +kubebuilder:validation:MinLength=1
	InstanceType string `json:"instanceType"`
	// Provider makes the node.
	Provider ProviderName `json:"provider"`
	// Version is the Kubernetes version of the node's kubelet; empty on
	// machines made before versions were recorded (the default version).
	// +optional
	Version string `json:"version,omitempty"`
	// TemplateHash identifies the pool template the machine was made from.
	// +optional
	TemplateHash string `json:"templateHash,omitempty"`
}

// MachineStatus is the observed state of a Machine.
type MachineStatus struct {
	// Phase: Pending, Provisioning, Running, Deleting or Failed.
	// +optional
	Phase MachinePhase `json:"phase,omitempty"`
	// ProviderID is the provider's identity of the instance (also on the Node).
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// NodeName is the name of the Node in the tenant cluster.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// FirstReadyTime is when the machine's node was first Ready with its
	// GPUs; until then repair gives it the pool's node startup timeout.
	// +optional
	FirstReadyTime *metav1.Time `json:"firstReadyTime,omitempty"`
	// GPUAllocatable is the number of GPUs the Node reports allocatable.
	// +optional
	GPUAllocatable int64 `json:"gpuAllocatable,omitempty"`
	// Conditions: Provisioned, Registered, GPUReady, Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Machine is one worker node of a NodePool.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mach,categories=fke
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.nodePoolName`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.instanceType`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Machine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MachineSpec   `json:"spec"`
	Status MachineStatus `json:"status,omitempty"`
}

// MachineList is a list of Machines.
//
// +kubebuilder:object:root=true
type MachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Machine `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Machine{}, &MachineList{})
}
