package provreq

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	provreqv1 "fke.dev/fke/internal/autoscaler/provreq/v1"
)

// PodsFor builds the request's pods: Count copies of each PodSet's
// PodTemplate (looked up by name in templates, all in the request's
// namespace), named "<request>-<set>-<i>" so simulation messages can be
// traced to a PodSet. It fails when a template is missing.
func PodsFor(pr *provreqv1.ProvisioningRequest, templates map[string]*corev1.PodTemplate) ([]*corev1.Pod, error) {
	var pods []*corev1.Pod
	for s, set := range pr.Spec.PodSets {
		tmpl, ok := templates[set.PodTemplateRef.Name]
		if !ok || tmpl == nil {
			return nil, fmt.Errorf("PodTemplate %s/%s of podSet %d not found", pr.Namespace, set.PodTemplateRef.Name, s)
		}
		for i := range int(set.Count) {
			name := fmt.Sprintf("%s-%d-%d", pr.Name, s, i)
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Namespace:   pr.Namespace,
					Name:        name,
					UID:         types.UID(string(pr.UID) + "/" + name),
					Labels:      copyMap(tmpl.Template.Labels),
					Annotations: copyMap(tmpl.Template.Annotations),
				},
				Spec: *tmpl.Template.Spec.DeepCopy(),
			}
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[provreqv1.AnnotationConsumeProvisioningRequest] = pr.Name
			p.Annotations[provreqv1.AnnotationProvisioningClassName] = pr.Spec.ProvisioningClassName
			pods = append(pods, p)
		}
	}
	return pods, nil
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
