// Package v1 holds the Go types of the ProvisioningRequest API
// (autoscaling.x-k8s.io/v1) as fke reads and writes them in tenant clusters.
//
// The types are JSON-compatible with the upstream definitions in
// k8s.io/autoscaler/cluster-autoscaler/apis; fke declares its own copy so the
// manager does not link the upstream package's code-generation and test-only
// dependencies. The CRD served by tenant clusters is generated from the
// upstream types (config/tenant/crd, `make generate-tenant-crds`).
//
// +kubebuilder:object:generate=true
// +groupName=autoscaling.x-k8s.io
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is autoscaling.x-k8s.io/v1.
var GroupVersion = schema.GroupVersion{Group: "autoscaling.x-k8s.io", Version: "v1"}

var (
	// SchemeBuilder registers ProvisioningRequest and ProvisioningRequestList.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the autoscaling.x-k8s.io/v1 kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ProvisioningRequest{}, &ProvisioningRequestList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// Condition types of a ProvisioningRequest.
const (
	// Accepted: the request was understood by a provisioner of its class.
	Accepted = "Accepted"
	// Provisioned: the capacity exists (True) or is being made or searched
	// for (False).
	Provisioned = "Provisioned"
	// Failed: the request cannot be satisfied; final.
	Failed = "Failed"
	// BookingExpired: the capacity is no longer held for the request; final.
	BookingExpired = "BookingExpired"
	// CapacityRevoked: capacity that was provisioned was taken away; final.
	CapacityRevoked = "CapacityRevoked"
)

// Provisioning classes.
const (
	// ClassCheckCapacity only checks whether the pods fit the cluster now.
	ClassCheckCapacity = "check-capacity.autoscaling.x-k8s.io"
	// ClassBestEffortAtomicScaleUp grows the cluster for all pods or for none.
	ClassBestEffortAtomicScaleUp = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
)

// Pod annotations that tie a workload's pods to a ProvisioningRequest.
const (
	// AnnotationConsumeProvisioningRequest names the request a pod consumes.
	AnnotationConsumeProvisioningRequest = "autoscaling.x-k8s.io/consume-provisioning-request"
	// AnnotationProvisioningClassName names the class of that request.
	AnnotationProvisioningClassName = "autoscaling.x-k8s.io/provisioning-class-name"
)

// ProvisioningRequest asks for capacity for a set of pods.
//
// +kubebuilder:object:root=true
type ProvisioningRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProvisioningRequestSpec   `json:"spec"`
	Status ProvisioningRequestStatus `json:"status,omitempty"`
}

// ProvisioningRequestList is a list of ProvisioningRequests.
//
// +kubebuilder:object:root=true
type ProvisioningRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`

	Items []ProvisioningRequest `json:"items"`
}

// ProvisioningRequestSpec is what is asked for; immutable.
type ProvisioningRequestSpec struct {
	// PodSets are the pods to make room for, all together.
	PodSets []PodSet `json:"podSets"`
	// ProvisioningClassName selects the provisioner and its semantics.
	ProvisioningClassName string `json:"provisioningClassName"`
	// Parameters are class-specific settings.
	Parameters map[string]Parameter `json:"parameters"`
}

// Parameter is one class-specific setting.
type Parameter string

// PodSet is Count pods shaped like a PodTemplate.
type PodSet struct {
	// PodTemplateRef names a PodTemplate in the request's namespace.
	PodTemplateRef Reference `json:"podTemplateRef"`
	// Count is the number of pods.
	Count int32 `json:"count"`
}

// Reference names an object in the same namespace.
type Reference struct {
	Name string `json:"name,omitempty"`
}

// ProvisioningRequestStatus is the provisioner's answer.
type ProvisioningRequestStatus struct {
	// Conditions: Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked.
	Conditions []metav1.Condition `json:"conditions"`
	// ProvisioningClassDetails are class-specific details.
	ProvisioningClassDetails map[string]Detail `json:"provisioningClassDetails"`
}

// Detail is one class-specific detail.
type Detail string
