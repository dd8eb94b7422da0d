package decide

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func containerWith(requests, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}
}

func qty(s string) resource.Quantity { return resource.MustParse(s) }

func tolerationsOf(spec corev1.PodSpec) string {
	var parts []string
	for _, t := range spec.Tolerations {
		parts = append(parts, fmt.Sprintf("%s:%s:%s:%s", t.Key, t.Operator, t.Value, t.Effect))
	}
	return strings.Join(parts, " ")
}

// TestAddExtendedResourceTolerations: a template gets the tolerations
// kube-apiserver's ExtendedResourceToleration plugin gives a pod: one
// {<resource> Exists NoSchedule} per extended resource its containers or
// init containers request, sorted, none twice, existing ones kept.
func TestAddExtendedResourceTolerations(t *testing.T) {
	t.Parallel()
	gpu := corev1.ResourceList{"nvidia.com/gpu": qty("8")}
	tests := []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{name: "GPU request", spec: corev1.PodSpec{Containers: []corev1.Container{containerWith(gpu, nil)}},
			want: "nvidia.com/gpu:Exists::NoSchedule"},
		{name: "GPU limit only (the request defaults to it)", spec: corev1.PodSpec{Containers: []corev1.Container{containerWith(nil, gpu)}},
			want: "nvidia.com/gpu:Exists::NoSchedule"},
		{name: "init container", spec: corev1.PodSpec{InitContainers: []corev1.Container{containerWith(gpu, nil)}, Containers: []corev1.Container{containerWith(nil, nil)}},
			want: "nvidia.com/gpu:Exists::NoSchedule"},
		{name: "every extended resource, sorted, once",
			spec: corev1.PodSpec{Containers: []corev1.Container{
				containerWith(corev1.ResourceList{"nvidia.com/mig-1g.10gb": qty("1"), "example.com/fpga": qty("1")}, nil),
				containerWith(gpu, gpu),
			}},
			want: "example.com/fpga:Exists::NoSchedule nvidia.com/gpu:Exists::NoSchedule nvidia.com/mig-1g.10gb:Exists::NoSchedule"},
		{name: "native resources get none",
			spec: corev1.PodSpec{Containers: []corev1.Container{containerWith(corev1.ResourceList{
				corev1.ResourceCPU: qty("1"), corev1.ResourceMemory: qty("1Gi"), "hugepages-2Mi": qty("2Mi"),
				"kubernetes.io/something": qty("1"), "example.kubernetes.io/x": qty("1"),
			}, nil)}}},
		{name: "an equal toleration is not added twice",
			spec: corev1.PodSpec{Containers: []corev1.Container{containerWith(gpu, nil)},
				Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}},
			want: "nvidia.com/gpu:Exists::NoSchedule"},
		{name: "other tolerations are kept, the plugin's is added",
			spec: corev1.PodSpec{Containers: []corev1.Container{containerWith(gpu, nil)},
				Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpEqual, Value: "present", Effect: corev1.TaintEffectNoExecute}}},
			want: "nvidia.com/gpu:Equal:present:NoExecute nvidia.com/gpu:Exists::NoSchedule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec.DeepCopy()
			AddExtendedResourceTolerations(spec)
			if got := tolerationsOf(*spec); got != tt.want {
				t.Errorf("tolerations = %q, want %q", got, tt.want)
			}
		})
	}
}
