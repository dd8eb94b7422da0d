// Package gpu benchmarks the GPU node agent: Allocate latency over the
// device-plugin gRPC socket, XID event → ListAndWatch latency, and the
// metrics scrape for 8 GPUs and 100 pods. Run:
//
//	go test -run '^$' -bench . -benchtime 2s ./bench/gpu/
package gpu

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/deviceplugin"
	"fke.dev/fke/internal/gpu/health"
	gpumetrics "fke.dev/fke/internal/gpu/metrics"
	"fke.dev/fke/internal/gpu/nvml"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func tempDir(b *testing.B) string {
	dir, err := os.MkdirTemp("", "fkebench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type fixture struct {
	mock    *nvml.Mock
	devs    []nvml.Device
	monitor *health.Monitor
	clock   *clocktesting.FakeClock
	plugin  *deviceplugin.Plugin
	client  pluginapi.DevicePluginClient
}

func newFixture(b *testing.B, ts *gpuconfig.TimeSlicing) *fixture {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fixture{clock: clocktesting.NewFakeClock(time.Unix(1000, 0))}
	var err error
	if f.mock, err = nvml.NewMock("dgxh100", "bench"); err != nil {
		b.Fatal(err)
	}
	if f.devs, err = f.mock.Devices(ctx); err != nil {
		b.Fatal(err)
	}
	f.monitor = health.NewMonitor(f.mock, f.mock.UUIDs(), health.Options{Hold: time.Minute, ProbeInterval: time.Hour, Clock: f.clock, Log: quietLog()})
	done := make(chan struct{})
	go func() { defer close(done); _ = f.monitor.Run(ctx) }()
	res, err := deviceplugin.BuildResources(f.devs, gpuconfig.MIGStrategyNone, ts)
	if err != nil {
		b.Fatal(err)
	}
	f.plugin = deviceplugin.NewPlugin(res[0], deviceplugin.TopologyOf(f.devs), filepath.Join(tempDir(b), "p.sock"),
		deviceplugin.ManagerOptions{Policy: gpuconfig.AllocationSpread, Strategy: gpuconfig.DeviceListEnvvar, Health: f.monitor, Log: quietLog()})
	if err := f.plugin.Start(); err != nil {
		b.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+f.plugin.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	f.client = pluginapi.NewDevicePluginClient(conn)
	b.Cleanup(func() { conn.Close(); f.plugin.Stop(); cancel(); <-done })
	deadline := time.Now().Add(5 * time.Second)
	for f.mock.OpenEventStreams() == 0 {
		if time.Now().After(deadline) {
			b.Fatal("event stream did not open")
		}
		time.Sleep(time.Millisecond)
	}
	return f
}

func BenchmarkAllocate(b *testing.B) {
	f := newFixture(b, nil)
	ctx := context.Background()
	u := f.mock.UUIDs()
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{u[0], u[1]}}}}
	for b.Loop() {
		if _, err := f.client.Allocate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetPreferredAllocationSharedx4(b *testing.B) {
	f := newFixture(b, &gpuconfig.TimeSlicing{Resources: []gpuconfig.ReplicatedResource{{Name: "nvidia.com/gpu", Replicas: 4}}})
	ctx := context.Background()
	var ids []string
	for _, d := range f.plugin.Devices() {
		ids = append(ids, d.ID)
	}
	req := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: ids, AllocationSize: 2}}}
	for b.Loop() {
		if _, err := f.client.GetPreferredAllocation(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkXIDToListAndWatch measures an injected XID 79 until ListAndWatch
// has sent the device Unhealthy; recovery (untimed) returns it Healthy.
func BenchmarkXIDToListAndWatch(b *testing.B) {
	f := newFixture(b, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := f.client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		b.Fatal(err)
	}
	u := f.mock.UUIDs()
	var lat []time.Duration
	i := 0
	for b.Loop() {
		uuid := u[i%len(u)]
		i++
		start := time.Now()
		if err := f.mock.InjectXID(uuid, 79); err != nil {
			b.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		f.clock.Step(time.Minute)
		f.monitor.ProbeDue(ctx)
		if _, err := stream.Recv(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	sort.Slice(lat, func(a, c int) bool { return lat[a] < lat[c] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

type fakePodResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	resp *podresourcesapi.ListPodResourcesResponse
}

func (f *fakePodResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return f.resp, nil
}

// benchScrape scrapes /metrics for 8 GPUs shared (time-slicing, 13 replicas
// each) by 100 single-container pods, pod-resources answers cached for ttl.
func benchScrape(b *testing.B, ttl time.Duration) {
	ctx := context.Background()
	m, err := nvml.NewMock("dgxh100", "bench")
	if err != nil {
		b.Fatal(err)
	}
	devs, err := m.Devices(ctx)
	if err != nil {
		b.Fatal(err)
	}
	resp := &podresourcesapi.ListPodResourcesResponse{}
	for p := 0; p < 100; p++ {
		uuid := devs[p%8].UUID
		resp.PodResources = append(resp.PodResources, &podresourcesapi.PodResources{
			Name: fmt.Sprintf("infer-%03d", p), Namespace: "ml",
			Containers: []*podresourcesapi.ContainerResources{{Name: "srv", Devices: []*podresourcesapi.ContainerDevices{{
				ResourceName: "nvidia.com/gpu", DeviceIds: []string{fmt.Sprintf("%s::%d", uuid, p/8)},
			}}}},
		})
	}
	sock := filepath.Join(tempDir(b), "pr.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, &fakePodResources{resp: resp})
	go func() { _ = srv.Serve(l) }()
	b.Cleanup(srv.Stop)
	pr, err := gpumetrics.NewPodResources(sock, ttl, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pr.Close() })
	h, err := gpumetrics.Handler(&gpumetrics.Collector{Sampler: m, Devices: devs, Hostname: "bench", Owners: pr, Log: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(h)
	b.Cleanup(hs.Close)
	client := hs.Client()
	var size int64
	for b.Loop() {
		r, err := client.Get(hs.URL + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, r.Body)
		r.Body.Close()
		size = n
	}
	b.ReportMetric(float64(size), "bytes/scrape")
	b.ReportMetric(float64(pr.Calls())/float64(b.N), "podresources-calls/scrape")
}

func BenchmarkScrape8GPUs100PodsUncached(b *testing.B) { benchScrape(b, 0) }
func BenchmarkScrape8GPUs100PodsCached(b *testing.B)   { benchScrape(b, time.Hour) }
