package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InstanceTypeSpec is the shape and price of a node.
type InstanceTypeSpec struct {
	// CPU is the node's allocatable CPU; greater than zero.
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).isGreaterThan(quantity('0'))",messageExpression="'cpu must be greater than zero, such as 4 or 500m (got ' + string(self) + ')'"
	CPU resource.Quantity `json:"cpu"`
	// Memory is the node's allocatable memory; greater than zero.
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).isGreaterThan(quantity('0'))",messageExpression="'memory must be greater than zero, such as 16Gi (got ' + string(self) + ')'"
	Memory resource.Quantity `json:"memory"`
	// Pods is the most pods the node runs.
	// +kubebuilder:default=110
	// +kubebuilder:validation:Minimum=1
	// +optional
	Pods int32 `json:"pods,omitempty"`
	// EphemeralStorage is the node's allocatable ephemeral storage.
	// +kubebuilder:default="100Gi"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).isGreaterThan(quantity('0'))",messageExpression="'ephemeralStorage must be greater than zero, such as 100Gi (got ' + string(self) + ')'"
	// +optional
	EphemeralStorage resource.Quantity `json:"ephemeralStorage,omitempty"`
	// GPU describes the node's accelerators; absent for CPU-only types.
	// +optional
	GPU *InstanceGPU `json:"gpu,omitempty"`
	// PricePerHour is the hourly price as a decimal string, e.g. "2.50"; never negative.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?$')",messageExpression="'pricePerHour must be a non-negative decimal such as 2.50 (got ' + self + ')'"
	// +optional
	PricePerHour string `json:"pricePerHour,omitempty"`
	// Zone is the topology zone the nodes are placed in.
	// +kubebuilder:default="local-a"
	// +optional
	Zone string `json:"zone,omitempty"`
	// Flavors maps a provider name to its own name of this type (e.g. an OpenStack flavor).
	// +optional
	Flavors map[string]string `json:"flavors,omitempty"`
}

// InstanceGPU describes the GPUs of an instance type.
type InstanceGPU struct {
	// Count of GPUs per node.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Count int32 `json:"count"`
	// Product is the GPU product name as NVML reports it, e.g. NVIDIA-H100-80GB-HBM3.
	// +kubebuilder:validation:MinLength=1
	Product string `json:"product"`
	// MemoryMiB is the memory of one GPU in MiB.
	// +kubebuilder:validation:Minimum=1
	MemoryMiB int64 `json:"memoryMiB"`
	// Family is the architecture, e.g. hopper, ampere, ada-lovelace, blackwell.
	// +optional
	Family string `json:"family,omitempty"`
	// ComputeCapability is major.minor, e.g. "9.0".
	// +kubebuilder:validation:Pattern=`^[0-9]+\.[0-9]+$`
	// +optional
	ComputeCapability string `json:"computeCapability,omitempty"`
	// MIGProfiles lists the MIG profiles the GPU supports, written as NVIDIA
	// names them: [<c>c.]<g>g.<memory>gb[+<attribute>], e.g. 1g.10gb, 3g.40gb,
	// 1c.3g.40gb or 1g.10gb+me (1 to 7 slices).
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.all(p, p.matches('^([1-7]c[.])?[1-7]g[.][1-9][0-9]*gb([+][a-z]+)?$'))",messageExpression="'MIG profile ' + self.filter(p, !p.matches('^([1-7]c[.])?[1-7]g[.][1-9][0-9]*gb([+][a-z]+)?$'))[0] + ' is not well formed: write <slices>g.<memory>gb as NVIDIA names them, e.g. 1g.10gb, 3g.40gb or 1g.10gb+me'"
	// +optional
	MIGProfiles []string `json:"migProfiles,omitempty"`
}

// InstanceType is a node shape offered to node pools. Cluster-scoped.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=it,categories=fke
// +kubebuilder:printcolumn:name="CPU",type=string,JSONPath=`.spec.cpu`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.spec.memory`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.spec.gpu.count`
// +kubebuilder:printcolumn:name="GPU",type=string,JSONPath=`.spec.gpu.product`
// +kubebuilder:printcolumn:name="Price/h",type=string,JSONPath=`.spec.pricePerHour`
type InstanceType struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec InstanceTypeSpec `json:"spec"`
}

// InstanceTypeList is a list of InstanceTypes.
//
// +kubebuilder:object:root=true
type InstanceTypeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InstanceType `json:"items"`
}

func init() {
	SchemeBuilder.Register(&InstanceType{}, &InstanceTypeList{})
}
