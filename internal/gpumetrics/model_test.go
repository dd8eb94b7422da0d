package gpumetrics

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	gpumetrics "fke.dev/fke/internal/gpu/metrics"
	"fke.dev/fke/internal/gpu/nvml"
)

func TestAggregate(t *testing.T) {
	tests := []struct {
		name   string
		agg    Aggregation
		values []float64
		want   float64
		ok     bool
	}{
		{"no GPU", Mean, nil, 0, false},
		{"mean of one", Mean, []float64{70}, 70, true},
		{"mean of two", Mean, []float64{100, 0}, 50, true},
		{"sum", Sum, []float64{1024, 2048, 512}, 3584, true},
		{"max", Max, []float64{41, 67, 55}, 67, true},
		{"max of negatives", Max, []float64{-3, -1}, -1, true},
		{"unknown aggregation", Aggregation("median"), []float64{1}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Aggregate(tt.agg, tt.values)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Aggregate(%s, %v) = %v, %v; want %v, %v", tt.agg, tt.values, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestAggregatePodUsesEachMetricsAggregation(t *testing.T) {
	got := AggregatePod(PerGPU{
		"GPU-a": {GPUUtil: 100, FBUsed: 1000, FBFree: 100, GPUTemp: 70, PowerUsage: 300, SMClock: 1400, XIDErrors: 0, MemCopyUtil: 40},
		"GPU-b": {GPUUtil: 20, FBUsed: 500, FBFree: 600, GPUTemp: 50, PowerUsage: 100, SMClock: 1000, XIDErrors: 79, MemCopyUtil: 10},
	})
	want := Values{GPUUtil: 60, FBUsed: 1500, FBFree: 700, GPUTemp: 70, PowerUsage: 400, SMClock: 1200, XIDErrors: 79, MemCopyUtil: 25}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(Metrics) != len(want) {
		t.Errorf("the test covers %d metrics, %d are served", len(want), len(Metrics))
	}
}

func TestSimulatedUtilization(t *testing.T) {
	tests := []struct {
		name       string
		load       float64
		ready, gpu int
		want       float64
	}{
		{"4.5 GPUs of load on one pod saturates it", 4.5, 1, 1, 100},
		{"4.5 on 7 pods", 4.5, 7, 1, 450.0 / 7},
		{"4.5 on 8 pods is under a 60% target", 4.5, 8, 1, 56.25},
		{"two GPUs per pod share the pod's part", 3, 2, 2, 75},
		{"no load", 0, 3, 1, 0},
		{"no ready pod", 2, 0, 1, 0},
		{"no GPU", 2, 2, 0, 0},
		{"negative load counts as none", -1, 2, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SimulatedUtilization(tt.load, tt.ready, tt.gpu); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("SimulatedUtilization(%v, %d, %d) = %v, want %v", tt.load, tt.ready, tt.gpu, got, tt.want)
			}
		})
	}
}

func TestParseLoad(t *testing.T) {
	for _, s := range []string{"0", "4.5", "12", "0.25"} {
		if _, err := ParseLoad(s); err != nil {
			t.Errorf("ParseLoad(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "-1", "NaN", "+Inf", "4.5 GPUs", "50%"} {
		if _, err := ParseLoad(s); err == nil || !strings.Contains(err.Error(), "4.5") {
			t.Errorf("ParseLoad(%q) = %v, want an error that shows the form", s, err)
		}
	}
}

func TestSimulate(t *testing.T) {
	const mem = 24576 // an L4's MiB
	pod := func(name, workload string, load float64, ready bool, gpus int) SimPod {
		return SimPod{Key: PodKey{"default", name}, Workload: workload, Load: load, Ready: ready, GPUs: gpus, GPUMemoryMiB: mem}
	}
	tests := []struct {
		name string
		pods []SimPod
		util map[string]float64 // pod -> DCGM_FI_DEV_GPU_UTIL; absent: no metrics
	}{
		{
			name: "load spread over the ready pods of a workload",
			pods: []SimPod{pod("a", "D/infer", 1.5, true, 1), pod("b", "D/infer", 1.5, true, 1), pod("c", "D/infer", 1.5, true, 1)},
			util: map[string]float64{"a": 50, "b": 50, "c": 50},
		},
		{
			name: "a pod that is not ready gets no traffic and does not share the load",
			pods: []SimPod{pod("a", "D/infer", 1, true, 1), pod("b", "D/infer", 1, false, 1)},
			util: map[string]float64{"a": 100, "b": 0},
		},
		{
			name: "workloads do not share load",
			pods: []SimPod{pod("a", "D/x", 0.5, true, 1), pod("b", "D/y", 2, true, 1)},
			util: map[string]float64{"a": 50, "b": 100},
		},
		{
			name: "a pod without GPUs has no GPU metrics and takes no share",
			pods: []SimPod{pod("a", "D/x", 1, true, 1), pod("cpu", "D/x", 1, true, 0)},
			util: map[string]float64{"a": 100},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Simulate(tt.pods)
			if len(got) != len(tt.util) {
				t.Fatalf("metrics for %d pods, want %d: %v", len(got), len(tt.util), got)
			}
			for name, want := range tt.util {
				v, ok := got[PodKey{"default", name}]
				if !ok {
					t.Fatalf("no metrics for pod %s", name)
				}
				if v[GPUUtil] != want {
					t.Errorf("pod %s: utilization %v, want %v", name, v[GPUUtil], want)
				}
			}
		})
	}
}

func TestSimulateDerivedMetricsOfAPodWithTwoGPUs(t *testing.T) {
	got := Simulate([]SimPod{{Key: PodKey{"ml", "p"}, Workload: "Pod/ml/p", Load: 1, Ready: true, GPUs: 2, GPUMemoryMiB: 81920}})
	v := got[PodKey{"ml", "p"}]
	want := Values{
		GPUUtil: 50, MemCopyUtil: 25,
		FBUsed: 2 * 40960, FBFree: 2 * 40960, // sums over both GPUs
		GPUTemp: 55, PowerUsage: 2 * 180, SMClock: 1410, XIDErrors: 0,
	}
	for k, w := range want {
		if v[k] != w {
			t.Errorf("%s = %v, want %v", k, v[k], w)
		}
	}
	// Without the node's GPU memory the memory metrics are left out.
	got = Simulate([]SimPod{{Key: PodKey{"ml", "p"}, Workload: "w", Load: 1, Ready: true, GPUs: 1}})
	if _, ok := got[PodKey{"ml", "p"}][FBUsed]; ok {
		t.Errorf("FB_USED served without a GPU memory size: %v", got)
	}
}

// fakeSampler gives each GPU a fixed sample.
type fakeSampler map[string]nvml.Sample

func (f fakeSampler) Sample(_ context.Context, uuid string) (nvml.Sample, error) { return f[uuid], nil }

type fakeOwners map[string][]gpumetrics.Owner

func (f fakeOwners) Owners(context.Context) (map[string][]gpumetrics.Owner, error) { return f, nil }

// TestParseAgentReadsTheAgentsExposition runs the agent's own collector and
// parses what it serves: the names and labels the adapter reads are the
// ones the agent writes.
func TestParseAgentReadsTheAgentsExposition(t *testing.T) {
	c := &gpumetrics.Collector{
		Sampler: fakeSampler{
			"GPU-0": {GPUUtil: 90, MemCopyUtil: 30, FBUsedMiB: 1000, FBFreeMiB: 79000, TempC: 60, PowerW: 250.5, SMClockMHz: 1980},
			"GPU-1": {GPUUtil: 30, MemCopyUtil: 10, FBUsedMiB: 3000, FBFreeMiB: 77000, TempC: 45, PowerW: 100, SMClockMHz: 1500},
			"GPU-2": {GPUUtil: 5},
			"GPU-3": {GPUUtil: 77},
		},
		Devices: []nvml.Device{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}, {Index: 2, UUID: "GPU-2"}, {Index: 3, UUID: "GPU-3"}},
		Owners: fakeOwners{
			// train holds two GPUs, one of them from two containers.
			"GPU-0": {{Pod: "train", Namespace: "ml", Container: "main"}, {Pod: "train", Namespace: "ml", Container: "side"}},
			"GPU-1": {{Pod: "train", Namespace: "ml", Container: "main"}},
			// time-sliced: both pods see the whole GPU.
			"GPU-2": {{Pod: "a", Namespace: "web", Container: "c"}, {Pod: "b", Namespace: "web", Container: "c"}},
			// GPU-3 is idle: no pod.
		},
		Hostname: "node-1",
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	pods, err := ParseAgent(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 3 {
		t.Fatalf("pods %v, want ml/train, web/a, web/b", pods)
	}
	train := AggregatePod(pods[PodKey{"ml", "train"}])
	for k, w := range map[string]float64{GPUUtil: 60, MemCopyUtil: 20, FBUsed: 4000, FBFree: 156000, GPUTemp: 60, PowerUsage: 350.5, SMClock: 1740, XIDErrors: 0} {
		if train[k] != w {
			t.Errorf("ml/train %s = %v, want %v", k, train[k], w)
		}
	}
	for _, p := range []string{"a", "b"} {
		if v := AggregatePod(pods[PodKey{"web", p}])[GPUUtil]; v != 5 {
			t.Errorf("web/%s utilization %v, want the shared GPU's 5", p, v)
		}
	}
	// Every metric the agent exports per GPU is served.
	served := map[string]bool{}
	for _, m := range Metrics {
		served[m.Name] = true
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "DCGM_") && !served[mf.GetName()] {
			t.Errorf("the agent exports %s, which the adapter does not serve", mf.GetName())
		}
	}
}

func TestParseAgentRefusesGarbage(t *testing.T) {
	if _, err := ParseAgent(strings.NewReader("DCGM_FI_DEV_GPU_UTIL{pod=\"x\" 1\n")); err == nil {
		t.Error("no error for a broken exposition")
	}
}
