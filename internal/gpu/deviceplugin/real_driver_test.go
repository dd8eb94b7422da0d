package deviceplugin

import (
	"context"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/health"
	"fke.dev/fke/internal/gpu/nvml/nvmltest"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestRealDriverKubeletFlow serves the GPUs of this machine, read through the
// real NVML, to a kubelet registration endpoint: whole GPUs, then the same
// GPUs time-sliced four ways. It skips where no NVIDIA driver is installed.
func TestRealDriverKubeletFlow(t *testing.T) {
	lib := nvmltest.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	devs, err := lib.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) == 0 {
		t.Fatal("the driver is installed but NVML lists no GPU")
	}
	var uuids []string
	for _, d := range devs {
		uuids = append(uuids, d.UUID)
	}
	sort.Strings(uuids)

	for _, tc := range []struct {
		name     string
		ts       *gpuconfig.TimeSlicing
		replicas int
	}{
		{"whole GPUs", nil, 1},
		{"time-sliced x4", &gpuconfig.TimeSlicing{Resources: []gpuconfig.ReplicatedResource{{Name: GPUResource, Replicas: 4}}}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctx)
			dir := shortTempDir(t)
			res, err := BuildResources(devs, gpuconfig.MIGStrategyNone, tc.ts)
			if err != nil {
				t.Fatal(err)
			}
			monitor := health.NewMonitor(lib, uuids, health.Options{})
			k := startKubelet(t, filepath.Join(dir, "kubelet.sock"))
			mgr, err := NewManager(res, TopologyOf(devs), ManagerOptions{Dir: dir, Health: monitor})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); _ = monitor.Run(ctx) }()
			go func() { defer wg.Done(); _ = mgr.Run(ctx) }()
			defer func() { cancel(); wg.Wait() }()

			eventually(t, "registration", 5*time.Second, func() bool { return len(k.registrations()) == 1 })
			reg := k.registrations()[0]
			if reg.ResourceName != GPUResource {
				t.Fatalf("registered %s", reg.ResourceName)
			}
			c := dialPlugin(t, filepath.Join(dir, reg.Endpoint))
			listed := recvWithin(t, watch(t, ctx, c), 5*time.Second, "initial list")
			if len(listed) != len(devs)*tc.replicas {
				t.Fatalf("advertised %d devices for %d GPUs × %d", len(listed), len(devs), tc.replicas)
			}
			perGPU := map[string]int{}
			for _, d := range listed {
				if d.Health != pluginapi.Healthy {
					t.Errorf("device %s is %s on an idle machine", d.ID, d.Health)
				}
				perGPU[SplitReplicaID(d.ID)]++
			}
			for _, u := range uuids {
				if perGPU[u] != tc.replicas {
					t.Errorf("GPU %s advertised %d times, want %d", u, perGPU[u], tc.replicas)
				}
			}

			resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{listed[0].ID}}}})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := resp.ContainerResponses[0].Envs[VisibleDevicesEnv], SplitReplicaID(listed[0].ID); got != want {
				t.Fatalf("%s=%q, want %q", VisibleDevicesEnv, got, want)
			}
			t.Logf("%s: %d devices advertised, Allocate(%s) → %s=%s", tc.name, len(listed), listed[0].ID, VisibleDevicesEnv, resp.ContainerResponses[0].Envs[VisibleDevicesEnv])
		})
	}
}
