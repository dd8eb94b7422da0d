// Package nodeutil holds the small Node and Pod predicates that several
// controllers share (the machine and nodepool controllers, the autoscaler).
package nodeutil

import (
	corev1 "k8s.io/api/core/v1"

	"fke.dev/fke/internal/nodetemplate"
)

// NodeReady reports whether the Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// RequestsGPU reports whether a container of the pod asks for nvidia.com/gpu
// in its limits or requests.
func RequestsGPU(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		if _, ok := c.Resources.Limits[nodetemplate.ResourceGPU]; ok {
			return true
		}
		if _, ok := c.Resources.Requests[nodetemplate.ResourceGPU]; ok {
			return true
		}
	}
	return false
}
