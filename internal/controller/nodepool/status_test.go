package nodepool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

func TestUsagesReuseUnchangedNodes(t *testing.T) {
	node := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), "nvidia.com/gpu": resource.MustParse("8"),
		}}}
	}
	gpuPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train", OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")},
		}}}},
	}
	n1, n2 := node("n1"), node("n2")
	nodes := map[string]*corev1.Node{"n1": n1, "n2": n2}
	machines := []*fkev1.Machine{
		{Status: fkev1.MachineStatus{NodeName: "n1"}},
		{Status: fkev1.MachineStatus{NodeName: "n2"}},
		{Status: fkev1.MachineStatus{}}, // not registered yet
	}
	version := map[string]uint64{"n1": 1, "n2": 1}
	pods := map[string][]*corev1.Pod{"n1": {gpuPod}}
	podsOn := func(n string) ([]*corev1.Pod, uint64) { return pods[n], version[n] }

	got, memo := usages(nodes, podsOn, machines, nil)
	if len(got) != 2 || got["n1"].gpus != 2 || got["n2"].gpus != 0 {
		t.Fatalf("usages = %+v, want n1 with 2 GPUs and n2 with none", got)
	}

	// A figure kept in the memo is reused while node and pods are the same:
	// plant one that Usage would never compute.
	planted := memo["n2"]
	planted.usage.gpus = 99
	memo["n2"] = planted
	if got, _ := usages(nodes, podsOn, machines, memo); got["n2"].gpus != 99 {
		t.Errorf("unchanged node recomputed: %+v", got["n2"])
	}

	tests := []struct {
		name   string
		change func()
	}{
		{"pods changed", func() { version["n2"]++ }},
		{"node object replaced", func() { nodes["n2"] = node("n2") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			memo["n2"] = planted
			tt.change()
			if got, _ := usages(nodes, podsOn, machines, memo); got["n2"].gpus != 0 {
				t.Errorf("changed node not recomputed: %+v", got["n2"])
			}
		})
	}
}
