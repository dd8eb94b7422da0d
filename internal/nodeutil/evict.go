package nodeutil

import corev1 "k8s.io/api/core/v1"

// NeedsEviction reports whether a pod must leave a node before it is removed:
// DaemonSet pods, mirror pods and finished pods stay.
func NeedsEviction(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return false
		}
	}
	return true
}
