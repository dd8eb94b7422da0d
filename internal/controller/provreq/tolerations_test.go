package provreq

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fke.dev/fke/internal/autoscaler/decide"
	provreqv1 "fke.dev/fke/internal/autoscaler/provreq/v1"
)

func containerWith(requests, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}
}

func qty(s string) resource.Quantity { return resource.MustParse(s) }

// TestDecideTemplateWithoutToleration: a gang of GPU pods written as users
// write them (no toleration; the tenant's admission plugin adds it to real
// pods) grows the tainted GPU pool instead of failing with "untolerated
// taint", as Kueue's PodTemplates are never admitted as pods.
func TestDecideTemplateWithoutToleration(t *testing.T) {
	tmpl := &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "worker"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{containerWith(nil, corev1.ResourceList{"nvidia.com/gpu": qty("8")})},
		}},
	}
	pr := request("r", provreqv1.ClassBestEffortAtomicScaleUp, 2)
	pods, err := PodsFor(pr, map[string]*corev1.PodTemplate{"worker": tmpl})
	if err != nil {
		t.Fatal(err)
	}
	if len(tmpl.Template.Spec.Tolerations) != 0 {
		t.Fatalf("the PodTemplate itself was changed: %v", tmpl.Template.Spec.Tolerations)
	}
	d := Decide(Input{Request: pr, Pods: pods, Pools: []decide.Pool{pool("gpu", 8, 0, 0, 3, 98)}, Replicas: map[string]int{"gpu": 0}, Now: t0})
	want := "Accepted=True/Accepted Provisioned=False/Provisioning book gpu+2 (0→2) resize gpu 0→2"
	if got := summary(d); got != want {
		t.Fatalf("decision = %q, want %q", got, want)
	}
}
