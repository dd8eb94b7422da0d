package metrics

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"fke.dev/fke/internal/gpu/nvml"
)

// FakePodResources is a kubelet pod-resources server on a unix socket.
type FakePodResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	mu    sync.Mutex
	resp  *podresourcesapi.ListPodResourcesResponse
	lists int
}

func (f *FakePodResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return f.resp, nil
}

func startPodResources(t testing.TB, resp *podresourcesapi.ListPodResourcesResponse) (*FakePodResources, string) {
	dir, err := os.MkdirTemp("", "fkepr")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &FakePodResources{resp: resp}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Stop(); os.RemoveAll(dir) })
	return f, sock
}

func pod(ns, name, container, resource string, ids ...string) *podresourcesapi.PodResources {
	return &podresourcesapi.PodResources{Name: name, Namespace: ns, Containers: []*podresourcesapi.ContainerResources{{
		Name: container, Devices: []*podresourcesapi.ContainerDevices{{ResourceName: resource, DeviceIds: ids}},
	}}}
}

func TestPodResourcesCache(t *testing.T) {
	resp := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		pod("ml", "train-0", "main", "nvidia.com/gpu", "GPU-a", "GPU-b"),
		pod("ml", "infer-0", "srv", "nvidia.com/gpu.shared", "GPU-c::1"),
		pod("ml", "infer-1", "srv", "nvidia.com/gpu.shared", "GPU-c::2"),
		pod("x", "fpga", "c", "example.com/fpga", "F-1"),
	}}
	f, sock := startPodResources(t, resp)
	fc := clocktesting.NewFakeClock(time.Unix(0, 0))
	p, err := NewPodResources(sock, 5*time.Second, fc)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	o, err := p.Owners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(o["GPU-a"]); got != "[{train-0 ml main}]" {
		t.Errorf("GPU-a: %s", got)
	}
	if got := len(o["GPU-c"]); got != 2 {
		t.Errorf("GPU-c owners %d, want 2 (replica suffix stripped)", got)
	}
	if _, ok := o["F-1"]; ok {
		t.Error("non-nvidia resource kept")
	}
	for i := 0; i < 10; i++ {
		if _, err := p.Owners(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if p.Calls() != 1 || f.lists != 1 {
		t.Fatalf("calls %d lists %d within TTL, want 1", p.Calls(), f.lists)
	}
	fc.Step(5 * time.Second)
	if _, err := p.Owners(ctx); err != nil || p.Calls() != 2 {
		t.Fatalf("after TTL calls %d err %v", p.Calls(), err)
	}
}

type xids map[string]uint64

func (x xids) LastXID(uuid string) uint64 { return x[uuid] }

func TestCollector(t *testing.T) {
	ctx := context.Background()
	m, err := nvml.NewMock("dgxh100", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := m.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u := m.UUIDs()
	_, sock := startPodResources(t, &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		pod("ml", "train-0", "main", "nvidia.com/gpu", u[0]),
	}})
	p, err := NewPodResources(sock, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := &Collector{Sampler: m, Devices: devs, Hostname: "node-1", XIDs: xids{u[2]: 79}, Owners: p}
	h, err := Handler(c)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, want := range []string{
		fmt.Sprintf(`DCGM_FI_DEV_GPU_UTIL{Hostname="node-1",UUID=%q,container="main",device="nvidia0",gpu="0",modelName="NVIDIA H100 80GB HBM3",namespace="ml",pod="train-0"} 0`, u[0]),
		fmt.Sprintf(`DCGM_FI_DEV_GPU_UTIL{Hostname="node-1",UUID=%q,container="",device="nvidia1",gpu="1",modelName="NVIDIA H100 80GB HBM3",namespace="",pod=""} 10`, u[1]),
		fmt.Sprintf(`DCGM_FI_DEV_FB_USED{Hostname="node-1",UUID=%q,container="",device="nvidia3",gpu="3",modelName="NVIDIA H100 80GB HBM3",namespace="",pod=""} 4096`, u[3]),
		fmt.Sprintf(`DCGM_FI_DEV_XID_ERRORS{Hostname="node-1",UUID=%q,container="",device="nvidia2",gpu="2",modelName="NVIDIA H100 80GB HBM3",namespace="",pod=""} 79`, u[2]),
		"DCGM_FI_DEV_FB_FREE{", "DCGM_FI_DEV_GPU_TEMP{", "DCGM_FI_DEV_POWER_USAGE{", "DCGM_FI_DEV_SM_CLOCK{", "DCGM_FI_DEV_MEM_COPY_UTIL{",
		`fke_gpu_scrape_errors{source="podresources"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s", want)
		}
	}
	if n := testutil.CollectAndCount(c, "DCGM_FI_DEV_GPU_UTIL"); n != 8 {
		t.Errorf("GPU_UTIL series %d, want 8", n)
	}
	// A lost GPU still exports its XID; the pod-resources outage is counted, not fatal.
	m.SetLost(u[5], true)
	if n := testutil.CollectAndCount(c, "DCGM_FI_DEV_GPU_UTIL"); n != 7 {
		t.Errorf("GPU_UTIL series with a lost GPU %d, want 7", n)
	}
	if n := testutil.CollectAndCount(c, "DCGM_FI_DEV_XID_ERRORS"); n != 8 {
		t.Errorf("XID series %d, want 8", n)
	}
}
