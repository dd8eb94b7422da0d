package nodeutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"fke.dev/fke/internal/nodetemplate"
)

func TestNodeReady(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		conds []corev1.NodeCondition
		want  bool
	}{
		"no conditions":   {nil, false},
		"ready":           {[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}, true},
		"not ready":       {[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}, false},
		"unknown":         {[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}, false},
		"only pressure":   {[]corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}}, false},
		"ready after one": {[]corev1.NodeCondition{{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: corev1.ConditionTrue}}, true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := NodeReady(&corev1.Node{Status: corev1.NodeStatus{Conditions: tc.conds}}); got != tc.want {
				t.Fatalf("NodeReady = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRequestsGPU(t *testing.T) {
	t.Parallel()
	one := resource.MustParse("1")
	pod := func(r corev1.ResourceRequirements) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cpu"}, {Name: "x", Resources: r}}}}
	}
	for name, tc := range map[string]struct {
		res  corev1.ResourceRequirements
		want bool
	}{
		"nothing":     {corev1.ResourceRequirements{}, false},
		"cpu only":    {corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: one}}, false},
		"gpu limit":   {corev1.ResourceRequirements{Limits: corev1.ResourceList{nodetemplate.ResourceGPU: one}}, true},
		"gpu request": {corev1.ResourceRequirements{Requests: corev1.ResourceList{nodetemplate.ResourceGPU: one}}, true},
		"mig slice":   {corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/mig-1g.10gb": one}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := RequestsGPU(pod(tc.res)); got != tc.want {
				t.Fatalf("RequestsGPU = %v, want %v", got, tc.want)
			}
		})
	}
}
