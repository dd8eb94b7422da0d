package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/health"
	"fke.dev/fke/internal/gpu/nvml"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeKubelet is the kubelet's Registration service on a temp-dir socket.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	srv *grpc.Server

	mu   sync.Mutex
	reqs []*pluginapi.RegisterRequest
}

func startKubelet(t *testing.T, socket string) *fakeKubelet {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{srv: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reqs = append(k.reqs, r)
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) registrations() []*pluginapi.RegisterRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*pluginapi.RegisterRequest(nil), k.reqs...)
}

func eventually(t *testing.T, what string, d time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fkedp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func dialPlugin(t *testing.T, socket string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// watch streams ListAndWatch responses into a channel.
func watch(t *testing.T, ctx context.Context, c pluginapi.DevicePluginClient) <-chan []*pluginapi.Device {
	t.Helper()
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan []*pluginapi.Device, 16)
	go func() {
		defer close(ch)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			ch <- r.Devices
		}
	}()
	return ch
}

func recvWithin(t *testing.T, ch <-chan []*pluginapi.Device, d time.Duration, what string) []*pluginapi.Device {
	t.Helper()
	select {
	case devs, ok := <-ch:
		if !ok {
			t.Fatalf("ListAndWatch ended waiting for %s", what)
		}
		return devs
	case <-time.After(d):
		t.Fatalf("no ListAndWatch update within %s (%s)", d, what)
	}
	return nil
}

func healthOf(devs []*pluginapi.Device) map[string]string {
	out := map[string]string{}
	for _, d := range devs {
		out[d.ID] = d.Health
	}
	return out
}

type agentUnderTest struct {
	mock    *nvml.Mock
	monitor *health.Monitor
	clock   *clocktesting.FakeClock
	manager *Manager
	dir     string
	kubelet *fakeKubelet
}

func startAgent(t *testing.T, strategy gpuconfig.DeviceListStrategy, selfCheck AllocatableSource) *agentUnderTest {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &agentUnderTest{dir: shortTempDir(t), clock: clocktesting.NewFakeClock(time.Unix(1000, 0))}
	var err error
	if a.mock, err = nvml.NewMock("dgxh100", "node-1"); err != nil {
		t.Fatal(err)
	}
	devs, err := a.mock.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.monitor = health.NewMonitor(a.mock, a.mock.UUIDs(), health.Options{Hold: time.Minute, ProbeInterval: 10 * time.Second, Clock: a.clock})
	res, err := BuildResources(devs, gpuconfig.MIGStrategyNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.kubelet = startKubelet(t, filepath.Join(a.dir, "kubelet.sock"))
	a.manager, err = NewManager(res, TopologyOf(devs), ManagerOptions{Dir: a.dir, Strategy: strategy, Health: a.monitor, SelfCheck: selfCheck})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = a.monitor.Run(ctx) }()
	go func() { defer wg.Done(); _ = a.manager.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	eventually(t, "event stream open", 2*time.Second, func() bool { return a.mock.OpenEventStreams() == 1 })
	return a
}

func TestKubeletFlow(t *testing.T) {
	a := startAgent(t, gpuconfig.DeviceListEnvvar, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// 1. Registration.
	eventually(t, "registration", 2*time.Second, func() bool { return len(a.kubelet.registrations()) == 1 })
	reg := a.kubelet.registrations()[0]
	if reg.Version != pluginapi.Version || reg.ResourceName != GPUResource || reg.Endpoint != "fke-nvidia.com-gpu.sock" || !reg.Options.GetPreferredAllocationAvailable {
		t.Fatalf("register request %+v", reg)
	}

	// 2. The kubelet calls back: options, ListAndWatch with 8 healthy devices.
	c := dialPlugin(t, filepath.Join(a.dir, reg.Endpoint))
	opts, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil || !opts.GetPreferredAllocationAvailable {
		t.Fatalf("options %v err %v", opts, err)
	}
	updates := watch(t, ctx, c)
	devs := recvWithin(t, updates, time.Second, "initial list")
	if len(devs) != 8 {
		t.Fatalf("got %d devices, want 8", len(devs))
	}
	for _, d := range devs {
		if d.Health != pluginapi.Healthy || d.Topology == nil || len(d.Topology.Nodes) != 1 {
			t.Fatalf("device %v", d)
		}
	}

	// 3. Preferred allocation and Allocate of 2 devices.
	var ids []string
	for _, d := range devs {
		ids = append(ids, d.ID)
	}
	pref, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: ids, AllocationSize: 2}}})
	if err != nil || len(pref.ContainerResponses[0].DeviceIDs) != 2 {
		t.Fatalf("preferred %v err %v", pref, err)
	}
	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: pref.ContainerResponses[0].DeviceIDs}}})
	if err != nil {
		t.Fatal(err)
	}
	visible := strings.Split(resp.ContainerResponses[0].Envs[VisibleDevicesEnv], ",")
	known := map[string]bool{}
	for _, u := range a.mock.UUIDs() {
		known[u] = true
	}
	if len(visible) != 2 || visible[0] == visible[1] || !known[visible[0]] || !known[visible[1]] {
		t.Fatalf("NVIDIA_VISIBLE_DEVICES=%v", visible)
	}

	// 4. A reset-class XID makes the device Unhealthy within 1s; others stay Healthy.
	bad := a.mock.UUIDs()[3]
	start := time.Now()
	if err := a.mock.InjectXID(bad, 79); err != nil {
		t.Fatal(err)
	}
	devs = recvWithin(t, updates, time.Second, "unhealthy after XID 79")
	t.Logf("XID → Unhealthy in ListAndWatch: %s", time.Since(start))
	h := healthOf(devs)
	for id, st := range h {
		want := pluginapi.Healthy
		if id == bad {
			want = pluginapi.Unhealthy
		}
		if st != want {
			t.Fatalf("device %s is %s, want %s", id, st, want)
		}
	}

	// 5. Recovery: after the hold, NVML answers, and the device is Healthy again.
	var recovered []*pluginapi.Device
	eventually(t, "recovery", 5*time.Second, func() bool {
		a.clock.Step(10 * time.Second)
		select {
		case recovered = <-updates:
			return true
		default:
			return false
		}
	})
	if healthOf(recovered)[bad] != pluginapi.Healthy {
		t.Fatalf("after recovery: %v", healthOf(recovered))
	}

	// 6. Kubelet restart, part 1: our socket is deleted → re-registered within 2s.
	if err := os.Remove(filepath.Join(a.dir, reg.Endpoint)); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, "re-registration after socket deletion", 2*time.Second, func() bool { return len(a.kubelet.registrations()) == 2 })
	t.Logf("socket deleted → re-registered in %s", took)
	if _, err := os.Stat(filepath.Join(a.dir, reg.Endpoint)); err != nil {
		t.Fatalf("plugin socket not re-created: %v", err)
	}

	// 7. Kubelet restart, part 2: kubelet.sock re-created → re-registered within 2s.
	a.kubelet.srv.Stop() // unlinks kubelet.sock
	eventually(t, "kubelet.sock removed", time.Second, func() bool {
		_, err := os.Stat(filepath.Join(a.dir, "kubelet.sock"))
		return os.IsNotExist(err)
	})
	k2 := startKubelet(t, filepath.Join(a.dir, "kubelet.sock"))
	took = eventually(t, "re-registration with new kubelet", 2*time.Second, func() bool { return len(k2.registrations()) == 1 })
	t.Logf("kubelet.sock re-created → re-registered in %s", took)

	// The re-registered plugin serves again.
	c2 := dialPlugin(t, filepath.Join(a.dir, reg.Endpoint))
	if devs := recvWithin(t, watch(t, ctx, c2), time.Second, "list after restart"); len(devs) != 8 {
		t.Fatalf("after restart: %d devices", len(devs))
	}
}

func TestAllocateCDI(t *testing.T) {
	a := startAgent(t, gpuconfig.DeviceListCDI, nil)
	eventually(t, "registration", 2*time.Second, func() bool { return len(a.kubelet.registrations()) == 1 })
	c := dialPlugin(t, filepath.Join(a.dir, SocketName(GPUResource)))
	u := a.mock.UUIDs()
	resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{u[0], u[1]}}}})
	if err != nil {
		t.Fatal(err)
	}
	cdi := resp.ContainerResponses[0].CdiDevices
	if len(cdi) != 2 || cdi[0].Name != "nvidia.com/gpu="+u[0] || cdi[1].Name != "nvidia.com/gpu="+u[1] {
		t.Fatalf("cdi devices %v", cdi)
	}
	if _, ok := resp.ContainerResponses[0].Envs[VisibleDevicesEnv]; ok {
		t.Error("envvar set in CDI mode")
	}
}

type fakeAllocatable struct {
	mu sync.Mutex
	v  map[string]int64
}

func (f *fakeAllocatable) Allocatable(context.Context) (map[string]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v, nil
}

func TestSelfCheckReRegistersOnDrift(t *testing.T) {
	alloc := &fakeAllocatable{v: map[string]int64{GPUResource: 8}}
	a := startAgent(t, gpuconfig.DeviceListEnvvar, alloc)
	eventually(t, "registration", 2*time.Second, func() bool { return a.manager.Registrations(GPUResource) == 1 })
	ctx := context.Background()
	if d, err := a.manager.SelfCheck(ctx); err != nil || len(d) != 0 {
		t.Fatalf("drift %v err %v", d, err)
	}
	// The kubelet lost our capacity (e.g. restarted without telling us).
	alloc.mu.Lock()
	alloc.v = map[string]int64{GPUResource: 0}
	alloc.mu.Unlock()
	if d, _ := a.manager.SelfCheck(ctx); len(d) != 1 {
		t.Fatalf("drift %v", d)
	}
	if a.manager.Registrations(GPUResource) != 1 {
		t.Fatal("re-registered after one drifted check")
	}
	if _, err := a.manager.SelfCheck(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "re-registration after drift", 2*time.Second, func() bool { return a.manager.Registrations(GPUResource) == 2 })
}

func TestMIGMixedOnePluginPerResource(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := shortTempDir(t)
	m, err := nvml.NewMock("dgxa100", "node-mig")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.EnableMIG(0, "1g.5gb", "1g.5gb", "3g.20gb"); err != nil {
		t.Fatal(err)
	}
	if err := m.EnableMIG(1, "1g.5gb"); err != nil {
		t.Fatal(err)
	}
	devs, err := m.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := BuildResources(devs, gpuconfig.MIGStrategyMixed, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := startKubelet(t, filepath.Join(dir, "kubelet.sock"))
	mgr, err := NewManager(res, TopologyOf(devs), ManagerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "three registrations", 2*time.Second, func() bool { return len(k.registrations()) == 3 })
	got := map[string]string{}
	for _, r := range k.registrations() {
		got[r.ResourceName] = r.Endpoint
	}
	want := map[string]int{"nvidia.com/gpu": 6, "nvidia.com/mig-1g.5gb": 3, "nvidia.com/mig-3g.20gb": 1}
	for name, n := range want {
		ep, ok := got[name]
		if !ok {
			t.Fatalf("%s not registered (got %v)", name, got)
		}
		devs := recvWithin(t, watch(t, ctx, dialPlugin(t, filepath.Join(dir, ep))), time.Second, name)
		if len(devs) != n {
			t.Errorf("%s: %d devices, want %d", name, len(devs), n)
		}
		for _, d := range devs {
			if name != "nvidia.com/gpu" && !strings.HasPrefix(d.ID, "MIG-") {
				t.Errorf("%s advertises %s", name, d.ID)
			}
		}
	}
}
