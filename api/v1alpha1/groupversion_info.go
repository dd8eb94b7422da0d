// Package v1alpha1 holds the fke.dev/v1alpha1 management API: Cluster, NodePool,
// Machine and InstanceType.
//
// +kubebuilder:object:generate=true
// +groupName=fke.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of the fke management API.
	GroupVersion = schema.GroupVersion{Group: "fke.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
