package local

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

func TestGPUBackend(t *testing.T) {
	h100 := &fkev1.InstanceGPU{Count: 8, Product: "NVIDIA-H100-80GB-HBM3"}
	for _, tc := range []struct {
		name       string
		gpu        *fkev1.InstanceGPU
		hostDriver bool
		want, err  string
	}{
		{"host driver: the real NVML", h100, true, "real", ""},
		{"no driver: the H100 machine simulated", h100, false, "mock:dgxh100", ""},
		{"H200", &fkev1.InstanceGPU{Count: 8, Product: "NVIDIA-H200"}, false, "mock:dgxh200", ""},
		{"A100", &fkev1.InstanceGPU{Count: 8, Product: "NVIDIA-A100-SXM4-80GB"}, false, "mock:dgxa100", ""},
		{"B200", &fkev1.InstanceGPU{Count: 8, Product: "NVIDIA-B200"}, false, "mock:dgxb200", ""},
		{"no machine of one A100 to simulate", &fkev1.InstanceGPU{Count: 1, Product: "NVIDIA-A100-SXM4-80GB"}, false, "", "no simulated machine has 1 × NVIDIA-A100-SXM4-80GB"},
		{"no L4 machine", &fkev1.InstanceGPU{Count: 8, Product: "NVIDIA-L4"}, false, "", "no NVIDIA driver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GPUBackend(tc.gpu, tc.hostDriver)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestNodeShape(t *testing.T) {
	q := resource.MustParse
	it := func(cpu, mem string, gpu bool) *fkev1.InstanceType {
		t := &fkev1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "t"}, Spec: fkev1.InstanceTypeSpec{CPU: q(cpu), Memory: q(mem)}}
		if gpu {
			t.Spec.GPU = &fkev1.InstanceGPU{Count: 8, Product: "NVIDIA-H100-80GB-HBM3"}
		}
		return t
	}
	hostCPU, hostMem := q("4"), q("16Gi")
	for _, tc := range []struct {
		name                string
		it                  *fkev1.InstanceType
		wantCPU, wantMemMin string
		note, err           bool
	}{
		{"a CPU type that fits: the rest is reserved", it("2", "4Gi", false), "2", "", false, false},
		{"a CPU type too large is refused", it("8", "4Gi", false), "", "", false, true},
		{"a GPU type too large gets the whole host", it("192", "2000Gi", true), "0", "", true, false},
		{"a GPU type that fits keeps its shape", it("2", "4Gi", true), "2", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reserved, note, err := nodeShape(hostCPU, hostMem, tc.it)
			if (err != nil) != tc.err || (note != "") != tc.note {
				t.Fatalf("err %v, note %q", err, note)
			}
			if err != nil {
				return
			}
			if cpu := reserved.Cpu(); cpu.Cmp(q(tc.wantCPU)) != 0 {
				t.Errorf("reserved CPU %s, want %s", cpu, tc.wantCPU)
			}
		})
	}
}
