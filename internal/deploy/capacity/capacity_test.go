package capacity

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"fke.dev/fke/internal/autoscaler/decide"
)

func deployment(name string, replicas int64, gpus string) *unstructured.Unstructured {
	res := map[string]any{"cpu": "1"}
	if gpus != "" {
		res["nvidia.com/gpu"] = gpus
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{
			"replicas": replicas,
			"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": name}},
				"spec": map[string]any{"containers": []any{map[string]any{
					"name": "c", "image": "x", "resources": map[string]any{"requests": res, "limits": res},
				}}},
			},
		},
	}}
}

func node(name, pool string, cpu, gpus int64) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name, "fke.dev/nodepool": pool}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(cpu, resource.DecimalSI),
			corev1.ResourceMemory: resource.MustParse("64Gi"),
			corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		}},
	}
	if gpus > 0 {
		n.Status.Allocatable["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return n
}

func TestPodsFor(t *testing.T) {
	job := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "batch/v1", "kind": "Job", "metadata": map[string]any{"name": "train", "namespace": "ml"},
		"spec": map[string]any{"parallelism": int64(4), "completions": int64(2), "template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c"}}}}},
	}}
	ds := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": map[string]any{"name": "agent"}}}
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}}}
	pods, err := PodsFor([]Change{{Object: deployment("web", 3, "1")}, {Object: job}, {Object: ds}, {Object: cm}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pods {
		got = append(got, p.Namespace+"/"+p.Name)
	}
	want := "default/web-preview-0,default/web-preview-1,default/web-preview-2,ml/train-preview-0,ml/train-preview-1"
	if strings.Join(got, ",") != want {
		t.Fatalf("pods %v, want %s", got, want)
	}
	if q := pods[0].Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]; q.Value() != 1 || pods[0].Labels["app"] != "web" {
		t.Errorf("pod template not kept: %+v", pods[0])
	}
}

func TestPreview(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// GPU nodes carry the taint only GPU pods tolerate (the API server's
	// admission adds the toleration to pods that request GPUs).
	gpuTemplate := node("template-gpu", "gpu", 64, 8)
	gpuTemplate.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}
	gpuPool := decide.Pool{Name: "gpu", Template: gpuTemplate, MinSize: 0, MaxSize: 4, PricePerHour: 24.5}
	cpuPool := decide.Pool{Name: "cpu", Template: node("template-cpu", "cpu", 4, 0), MinSize: 0, MaxSize: 2, PricePerHour: 0.2}
	types := map[string]string{"gpu": "gpu-h100x8", "cpu": "cpu-medium"}
	yes := true
	oldWeb := func(node string, i int) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-old-%s-%d", node, i), Namespace: "default", Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs", Controller: &yes}}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("1"), "nvidia.com/gpu": resource.MustParse("1"),
			}}}}}}
		return p
	}
	var full, two []*corev1.Pod
	for i := range 8 {
		full = append(full, oldWeb("gpu-1", i))
		two = append(two, oldWeb("gpu-1", i), oldWeb("gpu-2", i))
	}
	gpuNode := func(name string) decide.NodeInfo {
		return decide.NodeInfo{Node: node(name, "gpu", 64, 8), Pool: "gpu", Ready: true}
	}
	gpuPool2 := gpuPool
	gpuPool2.Current = 2
	tests := []struct {
		name    string
		nodes   []decide.NodeInfo
		pools   []decide.Pool
		changes []Change
		bound   []*corev1.Pod
		want    string
	}{
		{
			name:    "ten GPU pods on an empty cluster: two 8-GPU nodes",
			changes: []Change{{Object: deployment("web", 10, "1")}},
			want:    "pods=10 fit=0 gpu:+2@24.50=49.00 total=49.00",
		},
		{
			name:    "CPU pods grow the CPU pool, never the GPU one",
			changes: []Change{{Object: deployment("api", 6, "")}},
			want:    "pods=6 fit=0 cpu:+2@0.20=0.40 total=0.40",
		},
		{
			name:    "a changed deployment replaces its own pods: no growth",
			nodes:   []decide.NodeInfo{gpuNode("gpu-1")},
			bound:   full,
			changes: []Change{{Object: deployment("web", 8, "1"), Existing: true}},
			want:    "pods=8 fit=8 total=0.00",
		},
		{
			name:    "a new deployment beside a full node grows the pool",
			nodes:   []decide.NodeInfo{gpuNode("gpu-1")},
			bound:   full,
			changes: []Change{{Object: deployment("other", 2, "1")}},
			want:    "pods=2 fit=0 gpu:+1@24.50=24.50 total=24.50",
		},
		{
			name:    "a deployment shrinking from 16 to 4 GPU pods frees one of two GPU nodes",
			nodes:   []decide.NodeInfo{gpuNode("gpu-1"), gpuNode("gpu-2")},
			pools:   []decide.Pool{gpuPool2, cpuPool},
			bound:   two,
			changes: []Change{{Object: deployment("web", 4, "1"), Existing: true}},
			want:    "pods=4 fit=4 gpu:-[gpu-2]@24.50 after 10m0s total=-24.50",
		},
		{
			name:    "a pruned deployment frees its nodes",
			nodes:   []decide.NodeInfo{gpuNode("gpu-1"), gpuNode("gpu-2")},
			pools:   []decide.Pool{gpuPool2, cpuPool},
			bound:   two,
			changes: []Change{{Object: deployment("web", 16, "1"), Removed: true}},
			want:    "pods=0 fit=0 gpu:-[gpu-1 gpu-2]@24.50 after 10m0s total=-49.00",
		},
		{
			name:    "more than the pools can hold",
			changes: []Change{{Object: deployment("huge", 1, "16")}},
			want:    "pods=1 fit=0 total=0.00 noroom=1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pending, err := PodsFor(tt.changes)
			if err != nil {
				t.Fatal(err)
			}
			place := func(pods []*corev1.Pod) decide.Snapshot {
				nodes := slices.Clone(tt.nodes)
				for i := range nodes {
					for _, p := range pods {
						if p.Spec.NodeName == nodes[i].Node.Name {
							nodes[i].Pods = append(nodes[i].Pods, p)
						}
					}
				}
				return decide.Snapshot{Nodes: nodes}
			}
			pools := tt.pools
			if pools == nil {
				pools = []decide.Pool{gpuPool, cpuPool}
			}
			est := Preview(place(tt.bound), place(Without(tt.bound, tt.changes)), pools, types, decide.Expander{}, pending, now)
			got := fmt.Sprintf("pods=%d fit=%d", est.Pods, est.FitNow)
			for _, g := range est.Grow {
				got += fmt.Sprintf(" %s:+%d@%s=%s", g.Pool, g.Add, FormatPrice(g.PricePerHour), FormatPrice(g.CostPerHour))
			}
			for _, f := range est.Free {
				got += fmt.Sprintf(" %s:-%v@%s after %s", f.Pool, f.Nodes, FormatPrice(f.PricePerHour), f.After)
			}
			got += " total=" + FormatPrice(est.CostPerHour)
			if len(est.NoRoom) > 0 {
				got += fmt.Sprintf(" noroom=%d", len(est.NoRoom))
			}
			if got != tt.want {
				t.Fatalf("got  %s\nwant %s\n%v", got, tt.want, est.NoRoom)
			}
		})
	}
}
