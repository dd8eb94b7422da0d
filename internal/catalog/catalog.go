// Package catalog holds the default instance types `fke up` installs. An
// operator edits them like any object (kubectl edit instancetype gpu-h100x8);
// fke only creates the ones that are missing.
package catalog

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

type shape struct {
	name, cpu, memory, price string
	gpu                      *fkev1.InstanceGPU
}

var a100MIG = []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
var h100MIG = []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
var h200MIG = []string{"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}
var b200MIG = []string{"1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"}

// Shapes follow the public cloud offerings of the same accelerators; prices
// are indicative on-demand USD per hour.
var shapes = []shape{
	{name: "cpu-small", cpu: "2", memory: "8Gi", price: "0.10"},
	{name: "cpu-medium", cpu: "8", memory: "32Gi", price: "0.40"},
	{name: "cpu-large", cpu: "32", memory: "128Gi", price: "1.60"},
	{name: "gpu-l4x1", cpu: "8", memory: "32Gi", price: "0.85", gpu: &fkev1.InstanceGPU{
		Count: 1, Product: "NVIDIA-L4", MemoryMiB: 23034, Family: "ada-lovelace", ComputeCapability: "8.9"}},
	{name: "gpu-a100x1", cpu: "12", memory: "170Gi", price: "3.67", gpu: &fkev1.InstanceGPU{
		Count: 1, Product: "NVIDIA-A100-SXM4-80GB", MemoryMiB: 81920, Family: "ampere", ComputeCapability: "8.0", MIGProfiles: a100MIG}},
	{name: "gpu-a100x8", cpu: "96", memory: "1360Gi", price: "29.39", gpu: &fkev1.InstanceGPU{
		Count: 8, Product: "NVIDIA-A100-SXM4-80GB", MemoryMiB: 81920, Family: "ampere", ComputeCapability: "8.0", MIGProfiles: a100MIG}},
	{name: "gpu-h100x8", cpu: "192", memory: "2000Gi", price: "55.04", gpu: &fkev1.InstanceGPU{
		Count: 8, Product: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559, Family: "hopper", ComputeCapability: "9.0", MIGProfiles: h100MIG}},
	{name: "gpu-h200x8", cpu: "192", memory: "2000Gi", price: "63.30", gpu: &fkev1.InstanceGPU{
		Count: 8, Product: "NVIDIA-H200", MemoryMiB: 143771, Family: "hopper", ComputeCapability: "9.0", MIGProfiles: h200MIG}},
	{name: "gpu-b200x8", cpu: "224", memory: "2000Gi", price: "113.93", gpu: &fkev1.InstanceGPU{
		Count: 8, Product: "NVIDIA-B200", MemoryMiB: 183359, Family: "blackwell", ComputeCapability: "10.0", MIGProfiles: b200MIG}},
}

// Default returns the default catalog.
func Default() []fkev1.InstanceType {
	out := make([]fkev1.InstanceType, 0, len(shapes))
	for _, s := range shapes {
		it := fkev1.InstanceType{
			TypeMeta:   metav1.TypeMeta{APIVersion: fkev1.GroupVersion.String(), Kind: "InstanceType"},
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: map[string]string{"fke.dev/catalog": "default"}},
			Spec: fkev1.InstanceTypeSpec{
				CPU:              resource.MustParse(s.cpu),
				Memory:           resource.MustParse(s.memory),
				Pods:             110,
				EphemeralStorage: resource.MustParse("500Gi"),
				PricePerHour:     s.price,
				Zone:             "local-a",
			},
		}
		if s.gpu != nil {
			g := *s.gpu
			it.Spec.GPU = &g
		}
		out = append(out, it)
	}
	return out
}
