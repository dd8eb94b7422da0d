package machine

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeutil"
)

func node(ready bool, gpus string) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
	if gpus != "" {
		n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse(gpus)
	}
	return n
}

func TestObserve(t *testing.T) {
	tests := []struct {
		name           string
		node           *corev1.Node
		missing        bool
		want           int64
		registered     metav1.ConditionStatus
		gpuReady       metav1.ConditionStatus
		gpuReason      string
		ready          bool
		gpuAllocatable int64
	}{
		{name: "not registered", missing: true, want: 8, registered: metav1.ConditionFalse, gpuReady: metav1.ConditionFalse, gpuReason: fkev1.ReasonNodeNotFound},
		{name: "registered, not ready", node: node(false, "8"), want: 8, registered: metav1.ConditionFalse, gpuReady: metav1.ConditionTrue, gpuReason: fkev1.ReasonReady, gpuAllocatable: 8},
		{name: "ready before the device plugin", node: node(true, ""), want: 8, registered: metav1.ConditionTrue, gpuReady: metav1.ConditionFalse, gpuReason: fkev1.ReasonGPUsNotAllocatable},
		{name: "one GPU unhealthy", node: node(true, "7"), want: 8, registered: metav1.ConditionTrue, gpuReady: metav1.ConditionFalse, gpuReason: fkev1.ReasonGPUsNotAllocatable, gpuAllocatable: 7},
		{name: "all GPUs", node: node(true, "8"), want: 8, registered: metav1.ConditionTrue, gpuReady: metav1.ConditionTrue, gpuReason: fkev1.ReasonReady, ready: true, gpuAllocatable: 8},
		{name: "GPU health monitor cannot run", node: monitorFailedNode(), want: 8, registered: metav1.ConditionTrue, gpuReady: metav1.ConditionFalse, gpuReason: fkev1.ReasonGPUHealthMonitorFailed, gpuAllocatable: 8},
		{name: "CPU type", node: node(true, ""), want: 0, registered: metav1.ConditionTrue, gpuReady: metav1.ConditionTrue, gpuReason: fkev1.ReasonNoGPUs, ready: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := Observe(tt.node, tt.missing, tt.want)
			if st.Registered.Status != tt.registered || st.GPUReady.Status != tt.gpuReady || st.GPUReady.Reason != tt.gpuReason ||
				st.Ready() != tt.ready || st.GPUAllocatable != tt.gpuAllocatable {
				t.Fatalf("Observe = %+v (ready %v)", st, st.Ready())
			}
		})
	}
}

func TestNeedsEviction(t *testing.T) {
	ds := metav1.OwnerReference{Kind: "DaemonSet", Name: "agent", Controller: ptr.To(true)}
	rs := metav1.OwnerReference{Kind: "ReplicaSet", Name: "web", Controller: ptr.To(true)}
	tests := []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"replica set pod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{rs}}}, true},
		{"bare pod", corev1.Pod{}, true},
		{"daemon set pod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ds}}}, false},
		{"mirror pod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}}, false},
		{"finished pod", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false},
	}
	for _, tt := range tests {
		if got := nodeutil.NeedsEviction(&tt.pod); got != tt.want {
			t.Errorf("%s: NeedsEviction = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func monitorFailedNode() *corev1.Node {
	n := node(true, "8")
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "GPUHealthMonitorFailed", Status: corev1.ConditionTrue, Reason: "EventSubscriptionFailed", Message: "NVML events: unknown error"})
	return n
}
