package catalog

import (
	"strconv"
	"testing"
)

func TestDefaultCatalog(t *testing.T) {
	t.Parallel()
	want := map[string]int32{
		"cpu-small": 0, "cpu-medium": 0, "cpu-large": 0,
		"gpu-l4x1": 1, "gpu-a100x1": 1, "gpu-a100x8": 8, "gpu-h100x8": 8, "gpu-h200x8": 8, "gpu-b200x8": 8,
	}
	got := Default()
	if len(got) != len(want) {
		t.Fatalf("catalog has %d types, want %d", len(got), len(want))
	}
	for _, it := range got {
		gpus, ok := want[it.Name]
		if !ok {
			t.Errorf("unexpected type %s", it.Name)
			continue
		}
		var count int32
		if it.Spec.GPU != nil {
			count = it.Spec.GPU.Count
			if it.Spec.GPU.Product == "" || it.Spec.GPU.MemoryMiB <= 0 || it.Spec.GPU.Family == "" {
				t.Errorf("%s: incomplete GPU %+v", it.Name, it.Spec.GPU)
			}
		}
		if count != gpus {
			t.Errorf("%s: %d GPUs, want %d", it.Name, count, gpus)
		}
		if p, err := strconv.ParseFloat(it.Spec.PricePerHour, 64); err != nil || p <= 0 {
			t.Errorf("%s: bad price %q", it.Name, it.Spec.PricePerHour)
		}
		if it.Spec.CPU.IsZero() || it.Spec.Memory.IsZero() {
			t.Errorf("%s: no cpu or memory", it.Name)
		}
	}
}
