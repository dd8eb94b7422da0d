// Package nodetemplate computes the Node a NodePool's machine registers: its
// labels (well-known, fke and GPU Feature Discovery names), taints, capacity
// and allocatable. The node controllers and the autoscaler's simulation use
// the same template, so what the autoscaler plans is what appears.
package nodetemplate

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// Resource and label names users' tools expect.
const (
	ResourceGPU          corev1.ResourceName = "nvidia.com/gpu"
	LabelInstanceType                        = corev1.LabelInstanceTypeStable // node.kubernetes.io/instance-type
	LabelZone                                = corev1.LabelTopologyZone
	LabelGPUProduct                          = "nvidia.com/gpu.product"
	LabelGPUCount                            = "nvidia.com/gpu.count"
	LabelGPUMemory                           = "nvidia.com/gpu.memory"
	LabelGPUFamily                           = "nvidia.com/gpu.family"
	LabelGPUComputeMajor                     = "nvidia.com/gpu.compute.major"
	LabelGPUComputeMinor                     = "nvidia.com/gpu.compute.minor"
	LabelGPUPresent                          = "nvidia.com/gpu.present"
	LabelGPUMachine                          = "nvidia.com/gpu.machine"
	LabelGPUReplicas                         = "nvidia.com/gpu.replicas"
	LabelGPUSharing                          = "nvidia.com/gpu.sharing-strategy"
	LabelMIGCapable                          = "nvidia.com/mig.capable"
	LabelMIGStrategy                         = "nvidia.com/mig.strategy"
	// GPUTaintKey is the default taint of GPU nodes (nvidia.com/gpu=present:NoSchedule).
	GPUTaintKey = "nvidia.com/gpu"
)

// GPUTaint is the taint GPU nodes carry unless their pool opts out. The
// tenant API server's ExtendedResourceToleration admission plugin adds the
// matching toleration to pods that request nvidia.com/gpu.
var GPUTaint = corev1.Taint{Key: GPUTaintKey, Value: "present", Effect: corev1.TaintEffectNoSchedule}

// Build returns the Node a machine of pool with instance type it registers as nodeName.
// Labels are applied in this order, later ones winning: well-known labels,
// GPU labels, the pool's labels, then fke's own (which the pool cannot override).
func Build(pool *fkev1.NodePool, it *fkev1.InstanceType, nodeName string) *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname:   nodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
		LabelInstanceType:      it.Name,
		LabelZone:              zone(it),
	}
	for k, v := range GPULabels(it) {
		labels[k] = v
	}
	for k, v := range pool.Spec.Labels {
		labels[k] = v
	}
	labels[fkev1.LabelNodePool] = pool.PoolName()
	labels[fkev1.LabelCluster] = pool.Spec.ClusterName

	taints := append([]corev1.Taint(nil), pool.Spec.Taints...)
	if it.Spec.GPU != nil && !pool.Spec.DisableGPUTaint && !hasTaint(taints, GPUTaintKey) {
		taints = append(taints, GPUTaint)
	}
	res := Resources(it)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Capacity: res, Allocatable: res.DeepCopy()},
	}
}

// Resources returns a node's capacity for an instance type.
func Resources(it *fkev1.InstanceType) corev1.ResourceList {
	pods := it.Spec.Pods
	if pods == 0 {
		pods = 110
	}
	storage := it.Spec.EphemeralStorage
	if storage.IsZero() {
		storage = resource.MustParse("100Gi")
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:              it.Spec.CPU.DeepCopy(),
		corev1.ResourceMemory:           it.Spec.Memory.DeepCopy(),
		corev1.ResourcePods:             *resource.NewQuantity(int64(pods), resource.DecimalSI),
		corev1.ResourceEphemeralStorage: storage,
	}
	if it.Spec.GPU != nil {
		res[ResourceGPU] = *resource.NewQuantity(int64(it.Spec.GPU.Count), resource.DecimalSI)
	}
	return res
}

// GPULabels returns the GPU Feature Discovery labels of an instance type
// (empty for CPU-only types).
func GPULabels(it *fkev1.InstanceType) map[string]string {
	g := it.Spec.GPU
	if g == nil {
		return nil
	}
	l := map[string]string{
		LabelGPUPresent:  "true",
		LabelGPUProduct:  g.Product,
		LabelGPUCount:    strconv.Itoa(int(g.Count)),
		LabelGPUMemory:   strconv.FormatInt(g.MemoryMiB, 10),
		LabelGPUMachine:  it.Name,
		LabelGPUReplicas: "1",
		LabelGPUSharing:  "none",
		LabelMIGCapable:  strconv.FormatBool(len(g.MIGProfiles) > 0),
		LabelMIGStrategy: "none",
	}
	if g.Family != "" {
		l[LabelGPUFamily] = g.Family
	}
	if major, minor, ok := strings.Cut(g.ComputeCapability, "."); ok {
		l[LabelGPUComputeMajor], l[LabelGPUComputeMinor] = major, minor
	}
	return l
}

// GPUCount returns the GPUs a node of the type has.
func GPUCount(it *fkev1.InstanceType) int64 {
	if it.Spec.GPU == nil {
		return 0
	}
	return int64(it.Spec.GPU.Count)
}

func zone(it *fkev1.InstanceType) string {
	if it.Spec.Zone != "" {
		return it.Spec.Zone
	}
	return "local-a"
}

func hasTaint(taints []corev1.Taint, key string) bool {
	for _, t := range taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
