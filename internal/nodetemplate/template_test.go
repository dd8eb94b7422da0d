package nodetemplate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/catalog"
)

func instanceType(name string) *fkev1.InstanceType {
	for _, it := range catalog.Default() {
		if it.Name == name {
			return &it
		}
	}
	panic(name)
}

func TestBuild(t *testing.T) {
	t.Parallel()
	pool := func(mut func(*fkev1.NodePool)) *fkev1.NodePool {
		np := &fkev1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "demo.gpu"}, Spec: fkev1.NodePoolSpec{ClusterName: "demo", PoolName: "gpu"}}
		mut(np)
		return np
	}
	tests := []struct {
		name       string
		pool       *fkev1.NodePool
		it         string
		wantLabels map[string]string
		absent     []string
		wantTaint  bool
		wantGPUs   int64
	}{
		{
			name: "GPU type gets GFD labels, the GPU taint and GPU capacity",
			pool: pool(func(*fkev1.NodePool) {}), it: "gpu-h100x8",
			wantLabels: map[string]string{
				LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", LabelGPUCount: "8", LabelGPUMemory: "81559",
				LabelGPUFamily: "hopper", LabelGPUComputeMajor: "9", LabelGPUComputeMinor: "0",
				LabelMIGCapable: "true", LabelInstanceType: "gpu-h100x8", fkev1.LabelNodePool: "gpu",
				corev1.LabelHostname: "gpu-abc", LabelZone: "local-a",
			},
			wantTaint: true, wantGPUs: 8,
		},
		{
			name: "CPU type: no GPU labels, no taint",
			pool: pool(func(*fkev1.NodePool) {}), it: "cpu-medium",
			wantLabels: map[string]string{LabelInstanceType: "cpu-medium"},
			absent:     []string{LabelGPUProduct, LabelGPUCount},
		},
		{
			name: "pool opts out of the GPU taint",
			pool: pool(func(np *fkev1.NodePool) { np.Spec.DisableGPUTaint = true }), it: "gpu-l4x1",
			wantLabels: map[string]string{LabelGPUCount: "1", LabelMIGCapable: "false"}, wantGPUs: 1,
		},
		{
			name: "pool labels override well-known ones but not fke's own",
			pool: pool(func(np *fkev1.NodePool) {
				np.Spec.Labels = map[string]string{LabelZone: "local-b", fkev1.LabelNodePool: "other", "team": "ml"}
			}), it: "cpu-small",
			wantLabels: map[string]string{LabelZone: "local-b", fkev1.LabelNodePool: "gpu", "team": "ml"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := Build(tt.pool, instanceType(tt.it), "gpu-abc")
			for k, v := range tt.wantLabels {
				if n.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
				}
			}
			for _, k := range tt.absent {
				if _, ok := n.Labels[k]; ok {
					t.Errorf("label %s present", k)
				}
			}
			hasTaint := false
			for _, tn := range n.Spec.Taints {
				hasTaint = hasTaint || tn == GPUTaint
			}
			if hasTaint != tt.wantTaint {
				t.Errorf("GPU taint = %v, want %v", hasTaint, tt.wantTaint)
			}
			gpus := n.Status.Allocatable[ResourceGPU]
			if gpus.Value() != tt.wantGPUs {
				t.Errorf("allocatable GPUs = %d, want %d", gpus.Value(), tt.wantGPUs)
			}
			if n.Status.Allocatable.Cpu().IsZero() || n.Status.Allocatable.Pods().Value() != 110 {
				t.Errorf("allocatable %v", n.Status.Allocatable)
			}
		})
	}
}
