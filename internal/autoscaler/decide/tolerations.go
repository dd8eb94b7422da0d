package decide

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AddExtendedResourceTolerations adds to spec what kube-apiserver's
// ExtendedResourceToleration admission plugin adds to a pod: for every
// extended resource (a name with a domain outside kubernetes.io, such as
// nvidia.com/gpu) that a container or init container requests, a toleration
// {key: <resource>, operator: Exists, effect: NoSchedule}, unless the pod
// already has that toleration. Requests are read as the API server
// defaults them: a limit without a request is the request.
func AddExtendedResourceTolerations(spec *corev1.PodSpec) {
	names := map[corev1.ResourceName]bool{}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			for _, l := range []corev1.ResourceList{cs[i].Resources.Requests, cs[i].Resources.Limits} {
				for name := range l {
					if isExtendedResourceName(name) {
						names[name] = true
					}
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		tol := corev1.Toleration{Key: string(name), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
		if !slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool { return t.MatchToleration(&tol) }) {
			spec.Tolerations = append(spec.Tolerations, tol)
		}
	}
}

// isExtendedResourceName is the API's rule: a domain-prefixed name outside
// kubernetes.io (and not a "requests." quota name).
func isExtendedResourceName(name corev1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	domain := s[:strings.Index(s, "/")]
	return domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}
