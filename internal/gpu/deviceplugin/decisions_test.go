package deviceplugin

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/driver"
	"fke.dev/fke/internal/gpu/nvml"
)

func gpus(n int) []nvml.Device {
	out := make([]nvml.Device, n)
	for i := range out {
		out[i] = nvml.Device{Index: i, UUID: fmt.Sprintf("GPU-%d", i), NUMANode: i / 4}
	}
	return out
}

func withMIG(devs []nvml.Device, idx int, profiles ...string) []nvml.Device {
	devs[idx].MIGEnabled = true
	for k, p := range profiles {
		devs[idx].MIGDevices = append(devs[idx].MIGDevices, nvml.MIGDevice{UUID: fmt.Sprintf("MIG-%d-%d", idx, k), ParentUUID: devs[idx].UUID, ParentIndex: idx, Profile: p})
	}
	return devs
}

func summary(rs []Resource) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%s=%d", r.Name, len(r.Devices)))
	}
	return strings.Join(parts, " ")
}

func TestBuildResources(t *testing.T) {
	ts := func(rename string, byDefault bool, name string, replicas int) *gpuconfig.TimeSlicing {
		return &gpuconfig.TimeSlicing{RenameByDefault: byDefault, Resources: []gpuconfig.ReplicatedResource{{Name: name, Rename: rename, Replicas: replicas}}}
	}
	tests := []struct {
		name     string
		devs     []nvml.Device
		strategy gpuconfig.MIGStrategy
		ts       *gpuconfig.TimeSlicing
		want     string
		wantErr  string
	}{
		{"whole GPUs", gpus(8), gpuconfig.MIGStrategyNone, nil, "nvidia.com/gpu=8", ""},
		{"none hides MIG", withMIG(gpus(2), 0, "1g.10gb", "1g.10gb"), gpuconfig.MIGStrategyNone, nil, "nvidia.com/gpu=2", ""},
		{"single without MIG", gpus(2), gpuconfig.MIGStrategySingle, nil, "nvidia.com/gpu=2", ""},
		{"single with MIG", withMIG(withMIG(gpus(2), 0, "1g.10gb", "1g.10gb"), 1, "1g.10gb"), gpuconfig.MIGStrategySingle, nil, "nvidia.com/gpu=3", ""},
		{"single with mixed MIG and non-MIG", withMIG(gpus(2), 0, "1g.10gb"), gpuconfig.MIGStrategySingle, nil, "", "use mixed"},
		{"single with two profiles", withMIG(withMIG(gpus(2), 0, "1g.10gb"), 1, "3g.40gb"), gpuconfig.MIGStrategySingle, nil, "", "several MIG profiles"},
		{"mixed", withMIG(gpus(3), 0, "1g.10gb", "1g.10gb", "3g.40gb"), gpuconfig.MIGStrategyMixed, nil, "nvidia.com/gpu=2 nvidia.com/mig-1g.10gb=2 nvidia.com/mig-3g.40gb=1", ""},
		{"time-sliced", gpus(2), gpuconfig.MIGStrategyNone, ts("", false, "nvidia.com/gpu", 4), "nvidia.com/gpu=8", ""},
		{"time-sliced renameByDefault", gpus(2), gpuconfig.MIGStrategyNone, ts("", true, "nvidia.com/gpu", 4), "nvidia.com/gpu.shared=8", ""},
		{"time-sliced rename", gpus(2), gpuconfig.MIGStrategyNone, ts("gpu-shared", true, "nvidia.com/gpu", 2), "nvidia.com/gpu-shared=4", ""},
		{"time-sliced MIG profile", withMIG(gpus(2), 0, "1g.10gb", "1g.10gb"), gpuconfig.MIGStrategyMixed, ts("", true, "nvidia.com/mig-1g.10gb", 3), "nvidia.com/gpu=1 nvidia.com/mig-1g.10gb.shared=6", ""},
		{"unknown strategy", gpus(1), "odd", nil, "", "unknown MIG strategy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BuildResources(tc.devs, tc.strategy, tc.ts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := summary(got); s != tc.want {
				t.Fatalf("got %s, want %s", s, tc.want)
			}
		})
	}
}

func TestReplicaIDs(t *testing.T) {
	rs, err := BuildResources(gpus(2), gpuconfig.MIGStrategyNone, &gpuconfig.TimeSlicing{Resources: []gpuconfig.ReplicatedResource{{Name: "nvidia.com/gpu", Replicas: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range rs[0].Devices {
		ids = append(ids, d.ID)
		if d.UUID != SplitReplicaID(d.ID) || d.GPU != d.UUID {
			t.Errorf("device %+v", d)
		}
	}
	want := []string{"GPU-0::0", "GPU-0::1", "GPU-0::2", "GPU-1::0", "GPU-1::1", "GPU-1::2"}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	if !rs[0].Shared() || rs[0].Replicas != 3 {
		t.Errorf("resource %+v", rs[0])
	}
}

// devicesFor builds a device map: replicas per GPU for nGPU GPUs, NUMA i/4.
func devicesFor(nGPU, replicas int) map[string]Device {
	out := map[string]Device{}
	for g := 0; g < nGPU; g++ {
		uuid := fmt.Sprintf("GPU-%d", g)
		if replicas <= 1 {
			out[uuid] = Device{ID: uuid, UUID: uuid, GPU: uuid, GPUIndex: g, NUMANode: g / 4}
			continue
		}
		for r := 0; r < replicas; r++ {
			id := ReplicaID(uuid, r)
			out[id] = Device{ID: id, UUID: uuid, GPU: uuid, GPUIndex: g, NUMANode: g / 4, Replica: r}
		}
	}
	return out
}

func allIDs(m map[string]Device) []string {
	var out []string
	for id := range m {
		out = append(out, id)
	}
	return out
}

func without(ids []string, drop ...string) []string {
	skip := map[string]bool{}
	for _, d := range drop {
		skip[d] = true
	}
	var out []string
	for _, id := range ids {
		if !skip[id] {
			out = append(out, id)
		}
	}
	return out
}

func TestPreferred(t *testing.T) {
	pairs := Topology{ // NVLink pairs 0-1, 2-3, 4-5, 6-7; NUMA 0 for 0-3, 1 for 4-7.
		NVLink: map[int]map[int]bool{0: {1: true}, 1: {0: true}, 2: {3: true}, 3: {2: true}, 4: {5: true}, 5: {4: true}, 6: {7: true}, 7: {6: true}},
		NUMA:   map[int]int{0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1},
	}
	numaOnly := Topology{NUMA: map[int]int{0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}}
	whole := devicesFor(8, 1)
	shared := devicesFor(4, 4)
	tests := []struct {
		name    string
		policy  gpuconfig.AllocationPolicy
		devices map[string]Device
		topo    Topology
		req     Request
		want    []string
		wantErr bool
	}{
		{"packed picks an NVLink pair", gpuconfig.AllocationPacked, whole, pairs,
			Request{Available: without(allIDs(whole), "GPU-0"), Size: 2}, []string{"GPU-2", "GPU-3"}, false},
		{"packed completes the pair of a must-include", gpuconfig.AllocationPacked, whole, pairs,
			Request{Available: allIDs(whole), MustInclude: []string{"GPU-5"}, Size: 2}, []string{"GPU-5", "GPU-4"}, false},
		{"packed keeps 4 GPUs on one NUMA node", gpuconfig.AllocationPacked, whole, numaOnly,
			Request{Available: without(allIDs(whole), "GPU-0", "GPU-1"), Size: 4}, []string{"GPU-4", "GPU-5", "GPU-6", "GPU-7"}, false},
		{"spread whole GPUs stay connected", gpuconfig.AllocationSpread, whole, pairs,
			Request{Available: without(allIDs(whole), "GPU-0", "GPU-3"), Size: 2}, []string{"GPU-4", "GPU-5"}, false},
		{"packed replicas share one GPU, busiest first", gpuconfig.AllocationPacked, shared, Topology{},
			Request{Available: without(allIDs(shared), "GPU-2::0", "GPU-2::1"), Size: 2}, []string{"GPU-2::2", "GPU-2::3"}, false},
		{"spread replicas land on different GPUs", gpuconfig.AllocationSpread, shared, Topology{},
			Request{Available: allIDs(shared), Size: 2}, []string{"GPU-0::0", "GPU-1::0"}, false},
		{"spread prefers idle GPUs", gpuconfig.AllocationSpread, shared, Topology{},
			Request{Available: without(allIDs(shared), "GPU-0::0", "GPU-1::0", "GPU-1::1"), Size: 2}, []string{"GPU-2::0", "GPU-3::0"}, false},
		{"spread with more replicas than GPUs", gpuconfig.AllocationSpread, shared, Topology{},
			Request{Available: allIDs(shared), Size: 5}, []string{"GPU-0::0", "GPU-1::0", "GPU-2::0", "GPU-3::0", "GPU-0::1"}, false},
		{"spread avoids the must-include's GPU", gpuconfig.AllocationSpread, shared, Topology{},
			Request{Available: allIDs(shared), MustInclude: []string{"GPU-3::1"}, Size: 2}, []string{"GPU-3::1", "GPU-0::0"}, false},
		{"fewer available than size", gpuconfig.AllocationPacked, whole, pairs,
			Request{Available: []string{"GPU-1", "GPU-0"}, Size: 3}, []string{"GPU-0", "GPU-1"}, false},
		{"unknown available skipped", gpuconfig.AllocationPacked, whole, pairs,
			Request{Available: []string{"nope", "GPU-6", "GPU-7", "GPU-1"}, Size: 2}, []string{"GPU-6", "GPU-7"}, false},
		{"unknown must-include", gpuconfig.AllocationPacked, whole, pairs,
			Request{Available: allIDs(whole), MustInclude: []string{"nope"}, Size: 1}, nil, true},
		{"unknown policy", "random", whole, pairs, Request{Available: allIDs(whole), Size: 1}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Preferred(tc.policy, tc.devices, tc.topo, tc.req)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("no error, got %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestContainerResponse(t *testing.T) {
	rs, _ := BuildResources(gpus(2), gpuconfig.MIGStrategyNone, &gpuconfig.TimeSlicing{FailRequestsGreaterThanOne: true, Resources: []gpuconfig.ReplicatedResource{{Name: "nvidia.com/gpu", Replicas: 2}}})
	sharedRes := rs[0]
	shared := map[string]Device{}
	for _, d := range sharedRes.Devices {
		shared[d.ID] = d
	}
	wholeRes := Resource{Name: GPUResource, Replicas: 1}
	whole := devicesFor(2, 1)
	tests := []struct {
		name     string
		res      Resource
		byID     map[string]Device
		ids      []string
		strategy gpuconfig.DeviceListStrategy
		env      string
		cdi      []string
		wantErr  string
	}{
		{"envvar", wholeRes, whole, []string{"GPU-1", "GPU-0"}, gpuconfig.DeviceListEnvvar, "GPU-1,GPU-0", nil, ""},
		{"cdi", wholeRes, whole, []string{"GPU-0", "GPU-1"}, gpuconfig.DeviceListCDI, "", []string{"nvidia.com/gpu=GPU-0", "nvidia.com/gpu=GPU-1"}, ""},
		{"one replica", sharedRes, shared, []string{"GPU-1::1"}, gpuconfig.DeviceListEnvvar, "GPU-1", nil, ""},
		{"failRequestsGreaterThanOne", sharedRes, shared, []string{"GPU-0::0", "GPU-1::0"}, gpuconfig.DeviceListEnvvar, "", nil, "failRequestsGreaterThanOne"},
		{"unknown device", wholeRes, whole, []string{"GPU-9"}, gpuconfig.DeviceListEnvvar, "", nil, "unknown device"},
		{"nothing requested", wholeRes, whole, nil, gpuconfig.DeviceListEnvvar, "", nil, "no devices"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := ContainerResponse(tc.res, tc.byID, tc.ids, tc.strategy, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Envs[VisibleDevicesEnv] != tc.env {
				t.Errorf("env %q, want %q", resp.Envs[VisibleDevicesEnv], tc.env)
			}
			var cdi []string
			for _, c := range resp.CdiDevices {
				cdi = append(cdi, c.Name)
			}
			if !reflect.DeepEqual(cdi, tc.cdi) {
				t.Errorf("cdi %v, want %v", cdi, tc.cdi)
			}
		})
	}
	// Replicas of one GPU collapse to that GPU when allowed.
	rs2, _ := BuildResources(gpus(1), gpuconfig.MIGStrategyNone, &gpuconfig.TimeSlicing{Resources: []gpuconfig.ReplicatedResource{{Name: "nvidia.com/gpu", Replicas: 2}}})
	byID := map[string]Device{}
	for _, d := range rs2[0].Devices {
		byID[d.ID] = d
	}
	resp, err := ContainerResponse(rs2[0], byID, []string{"GPU-0::0", "GPU-0::1"}, gpuconfig.DeviceListEnvvar, nil)
	if err != nil || resp.Envs[VisibleDevicesEnv] != "GPU-0" {
		t.Fatalf("resp %v err %v", resp, err)
	}
}

func TestDrift(t *testing.T) {
	tests := []struct {
		name  string
		adv   map[string]int
		alloc map[string]int64
		want  []string
	}{
		{"equal", map[string]int{"nvidia.com/gpu": 8}, map[string]int64{"nvidia.com/gpu": 8}, nil},
		{"kubelet lost capacity", map[string]int{"nvidia.com/gpu": 8}, map[string]int64{"nvidia.com/gpu": 0}, []string{"nvidia.com/gpu"}},
		{"missing resource", map[string]int{"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 2}, map[string]int64{"nvidia.com/gpu": 8}, []string{"nvidia.com/mig-1g.10gb"}},
		{"unhealthy device excluded both sides", map[string]int{"nvidia.com/gpu": 7}, map[string]int64{"nvidia.com/gpu": 7}, nil},
		{"foreign resource ignored", map[string]int{"nvidia.com/gpu": 1}, map[string]int64{"nvidia.com/gpu": 1, "example.com/fpga": 2}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Drift(tc.adv, tc.alloc); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestContainerResponseWithDriver: a container gets its GPUs' device nodes,
// the control nodes and the driver's files read-only; none of another GPU.
func TestContainerResponseWithDriver(t *testing.T) {
	drv := &driver.Driver{
		Control:   []string{"/dev/nvidiactl", "/dev/nvidia-uvm"},
		Nodes:     map[string][]string{"GPU-0": {"/dev/nvidia0"}, "GPU-1": {"/dev/nvidia1"}},
		Libraries: []driver.Mount{{HostPath: "/usr/lib/libcuda.so.560", ContainerPath: "/usr/lib/libcuda.so.1"}},
		Tools:     []driver.Mount{{HostPath: "/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi"}},
	}
	resp, err := ContainerResponse(Resource{Name: GPUResource, Replicas: 1}, devicesFor(2, 1), []string{"GPU-1"}, gpuconfig.DeviceListEnvvar, drv)
	if err != nil {
		t.Fatal(err)
	}
	var devs, mounts []string
	for _, d := range resp.Devices {
		if d.HostPath != d.ContainerPath || d.Permissions != "rw" {
			t.Errorf("device %+v", d)
		}
		devs = append(devs, d.HostPath)
	}
	for _, m := range resp.Mounts {
		if !m.ReadOnly {
			t.Errorf("mount %+v is writable", m)
		}
		mounts = append(mounts, m.HostPath+":"+m.ContainerPath)
	}
	if want := []string{"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"}; !reflect.DeepEqual(devs, want) {
		t.Errorf("devices %v, want %v", devs, want)
	}
	if want := []string{"/usr/lib/libcuda.so.560:/usr/lib/libcuda.so.1", "/usr/bin/nvidia-smi:/usr/bin/nvidia-smi"}; !reflect.DeepEqual(mounts, want) {
		t.Errorf("mounts %v, want %v", mounts, want)
	}
	if resp.Envs[VisibleDevicesEnv] != "GPU-1" || resp.Envs[driver.CUDAVisibleDevicesEnv] != "GPU-1" {
		t.Errorf("env %v", resp.Envs)
	}
}
