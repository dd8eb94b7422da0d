package nvml_test

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/labels"
	"fke.dev/fke/internal/gpu/nvml"
	"fke.dev/fke/internal/gpu/nvml/nvmltest"
)

// smiGPU is one row of nvidia-smi's query output.
type smiGPU struct {
	index      int
	uuid, name string
	memoryMiB  uint64
	computeCap string
	driver     string
}

// querySMI asks nvidia-smi, the driver's own tool, for what NVML should report.
func querySMI(t *testing.T) []smiGPU {
	t.Helper()
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		t.Skip("nvidia-smi not found; nothing to compare against")
	}
	out, err := exec.Command(path, "--query-gpu=index,uuid,name,memory.total,compute_cap,driver_version", "--format=csv,noheader,nounits").Output()
	if err != nil {
		t.Fatalf("nvidia-smi: %v", err)
	}
	var gpus []smiGPU
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, ",")
		if len(f) != 6 {
			t.Fatalf("nvidia-smi line %q", line)
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		idx, err1 := strconv.Atoi(f[0])
		mem, err2 := strconv.ParseUint(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("nvidia-smi line %q", line)
		}
		gpus = append(gpus, smiGPU{index: idx, uuid: f[1], name: f[2], memoryMiB: mem, computeCap: f[4], driver: f[5]})
	}
	return gpus
}

// TestRealDriver checks the adapter against the real NVML where a driver is
// installed: what it discovers must agree with nvidia-smi, every GPU must
// answer probes and metric reads, the event subscription must start, and the
// labels must be what GFD would set for that GPU.
func TestRealDriver(t *testing.T) {
	lib := nvmltest.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	sys, err := lib.System(ctx)
	if err != nil {
		t.Fatal(err)
	}
	major, minor := sys.CUDAVersion()
	t.Logf("driver %s, CUDA %d.%d, NVML %s", sys.DriverVersion, major, minor, sys.NVMLVersion)
	if sys.DriverVersion == "" || major < 10 {
		t.Fatalf("system %+v", sys)
	}

	devs, err := lib.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	smi := querySMI(t)
	if len(devs) != len(smi) {
		t.Fatalf("NVML found %d GPUs, nvidia-smi %d", len(devs), len(smi))
	}
	for i, d := range devs {
		s := smi[i]
		t.Logf("GPU %d: %s %s %d MiB cc %d.%d arch %q family %q bus %s numa %d mig capable %v enabled %v (%d MIG devices)",
			d.Index, d.UUID, d.Name, d.MemoryMiB, d.ComputeMajor, d.ComputeMinor, d.Architecture, d.Family, d.PCIBusID, d.NUMANode, d.MIGCapable, d.MIGEnabled, len(d.MIGDevices))
		if d.Index != s.index || d.UUID != s.uuid || d.Name != s.name || d.MemoryMiB != s.memoryMiB {
			t.Errorf("GPU %d: NVML says %+v, nvidia-smi %+v", i, d, s)
		}
		if cc := strconv.Itoa(d.ComputeMajor) + "." + strconv.Itoa(d.ComputeMinor); cc != s.computeCap {
			t.Errorf("GPU %d: compute capability %s, nvidia-smi %s", i, cc, s.computeCap)
		}
		if s.driver != sys.DriverVersion {
			t.Errorf("driver %s, nvidia-smi %s", sys.DriverVersion, s.driver)
		}
		if d.Family != nvml.FamilyForComputeCapability(d.ComputeMajor, d.ComputeMinor) || d.Family == "undefined" {
			t.Errorf("GPU %d: family %q", i, d.Family)
		}
		if err := lib.Probe(ctx, d.UUID); err != nil {
			t.Errorf("GPU %d: probe: %v", i, err)
		}
		smp, err := lib.Sample(ctx, d.UUID)
		if err != nil {
			t.Errorf("GPU %d: sample: %v", i, err)
			continue
		}
		t.Logf("GPU %d sample: %+v", i, smp)
		if smp.FBUsedMiB+smp.FBFreeMiB == 0 || smp.FBUsedMiB+smp.FBFreeMiB > d.MemoryMiB {
			t.Errorf("GPU %d: used %d + free %d MiB against %d total", i, smp.FBUsedMiB, smp.FBFreeMiB, d.MemoryMiB)
		}
		if smp.GPUUtil > 100 || smp.MemCopyUtil > 100 {
			t.Errorf("GPU %d: utilisation out of range: %+v", i, smp)
		}
	}
	if err := lib.Probe(ctx, "GPU-00000000-0000-0000-0000-000000000000"); err == nil {
		t.Error("probe of an unknown UUID succeeded")
	}

	// The event subscription starts, and waiting on a quiet GPU ends with
	// the context, not with an error that would mark devices unhealthy.
	ev, err := lib.Events(ctx)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	e, err := ev.Next(wctx)
	wcancel()
	ev.Close()
	switch {
	case err == nil:
		t.Logf("an event arrived while waiting: %s", e)
	case !errors.Is(err, context.DeadlineExceeded):
		t.Errorf("waiting for events: %v", err)
	}

	l := labels.For(sys, devs, gpuconfig.Config{}, false)
	t.Logf("labels: %v", l)
	want := map[string]string{
		labels.Present:      "true",
		labels.Count:        strconv.Itoa(len(devs)),
		labels.Product:      strings.ReplaceAll(devs[0].Name, " ", "-"),
		labels.Memory:       strconv.FormatUint(devs[0].MemoryMiB, 10),
		labels.Family:       devs[0].Family,
		labels.ComputeMajor: strconv.Itoa(devs[0].ComputeMajor),
		labels.ComputeMinor: strconv.Itoa(devs[0].ComputeMinor),
		labels.DriverFull:   sys.DriverVersion,
		labels.RuntimeMajor: strconv.Itoa(major),
		labels.MIGCapable:   strconv.FormatBool(devs[0].MIGCapable),
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("label %s=%q, want %q", k, l[k], v)
		}
	}
}

// TestRealMatchesMock compares a real GPU with the mock profile of the same
// product, so fleets simulated with the mock look like real nodes.
func TestRealMatchesMock(t *testing.T) {
	lib := nvmltest.Real(t)
	ctx := context.Background()
	devs, err := lib.Devices(ctx)
	if err != nil || len(devs) == 0 {
		t.Fatalf("devices %v err %v", devs, err)
	}
	profile := ""
	for _, p := range []struct{ match, profile string }{{"A100", "dgxa100"}, {"H100", "dgxh100"}, {"H200", "dgxh200"}, {"B200", "dgxb200"}} {
		if strings.Contains(devs[0].Name, p.match) {
			profile = p.profile
		}
	}
	if profile == "" {
		t.Skipf("no mock profile for %s", devs[0].Name)
	}
	mock, err := nvml.Open(ctx, "mock:"+profile, "n", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mock.Close()
	mdevs, err := mock.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, m := devs[0], mdevs[0]
	t.Logf("real %s %d MiB cc %d.%d; mock %s %s %d MiB cc %d.%d", r.Name, r.MemoryMiB, r.ComputeMajor, r.ComputeMinor, profile, m.Name, m.MemoryMiB, m.ComputeMajor, m.ComputeMinor)
	if r.Name != m.Name || r.ComputeMajor != m.ComputeMajor || r.ComputeMinor != m.ComputeMinor || r.Family != m.Family || r.MIGCapable != m.MIGCapable {
		t.Errorf("mock %s differs from the real GPU: real %+v, mock %+v", profile, r, m)
	}
	if r.MemoryMiB != m.MemoryMiB {
		t.Errorf("memory: real %d MiB, mock %s %d MiB", r.MemoryMiB, profile, m.MemoryMiB)
	}
}
