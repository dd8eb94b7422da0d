package nvml

import (
	"context"
	"errors"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestMockDiscovery(t *testing.T) {
	tests := []struct {
		mock      string
		name      string
		memoryMiB uint64
		major     int
		family    string
		driver    string
	}{
		{"dgxa100", "Mock NVIDIA A100-SXM4-40GB", 40960, 8, "ampere", "550.54.15"},
		{"dgxh100", "NVIDIA H100 80GB HBM3", 81920, 9, "hopper", "550.54.15"},
		{"dgxh200", "NVIDIA H200", 143771, 9, "hopper", "550.54.15"},
		{"dgxb200", "NVIDIA B200 180GB HBM3e", 184320, 10, "blackwell", "560.28.03"},
	}
	for _, tc := range tests {
		t.Run(tc.mock, func(t *testing.T) {
			ctx := context.Background()
			m, err := NewMock(tc.mock, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			devs, err := m.Devices(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(devs) != 8 {
				t.Fatalf("got %d devices, want 8", len(devs))
			}
			seen := map[string]bool{}
			for i, d := range devs {
				if d.Index != i || d.UUID == "" || seen[d.UUID] {
					t.Errorf("device %d: index %d uuid %q (dup %v)", i, d.Index, d.UUID, seen[d.UUID])
				}
				seen[d.UUID] = true
				if tc.name != "" && d.Name != tc.name {
					t.Errorf("name %q, want %q", d.Name, tc.name)
				}
				if tc.memoryMiB != 0 && d.MemoryMiB != tc.memoryMiB {
					t.Errorf("memory %d, want %d", d.MemoryMiB, tc.memoryMiB)
				}
				if d.ComputeMajor != tc.major || d.Family != tc.family {
					t.Errorf("compute %d family %q, want %d %q", d.ComputeMajor, d.Family, tc.major, tc.family)
				}
				if !d.MIGCapable || d.MIGEnabled {
					t.Errorf("MIG capable %v enabled %v, want true false", d.MIGCapable, d.MIGEnabled)
				}
				wantNUMA := 0
				if i >= 4 {
					wantNUMA = 1
				}
				if d.NUMANode != wantNUMA || len(d.NVLinkPeers) != 7 {
					t.Errorf("numa %d peers %v", d.NUMANode, d.NVLinkPeers)
				}
				if d.PCIBusID == "" {
					t.Errorf("empty PCI bus ID")
				}
			}
			sys, err := m.System(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if sys.DriverVersion != tc.driver || sys.CUDADriverVersion < 12000 {
				t.Errorf("system %+v", sys)
			}
			s, err := m.Sample(ctx, devs[3].UUID)
			if err != nil {
				t.Fatal(err)
			}
			if s.GPUUtil != 30 || s.FBUsedMiB != 4096 || s.TempC != 43 || s.FBFreeMiB+s.FBUsedMiB != devs[3].MemoryMiB {
				t.Errorf("sample %+v", s)
			}
		})
	}
}

func TestMockUUIDsAreDeterministicPerSeed(t *testing.T) {
	a, _ := NewMock("dgxh100", "node-a")
	b, _ := NewMock("dgxh100", "node-a")
	c, _ := NewMock("dgxh100", "node-b")
	if a.UUIDs()[0] != b.UUIDs()[0] || a.UUIDs()[0] == c.UUIDs()[0] {
		t.Fatalf("uuids a=%s b=%s c=%s", a.UUIDs()[0], b.UUIDs()[0], c.UUIDs()[0])
	}
}

func TestMockMIG(t *testing.T) {
	ctx := context.Background()
	m, err := NewMock("dgxh100", "n")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.EnableMIG(0, "1g.10gb", "1g.10gb", "3g.40gb"); err != nil {
		t.Fatal(err)
	}
	if err := m.EnableMIG(1, "9g.1tb"); err == nil {
		t.Fatal("unknown profile accepted")
	}
	devs, err := m.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	if !d.MIGEnabled || len(d.MIGDevices) != 3 {
		t.Fatalf("MIG enabled %v devices %+v", d.MIGEnabled, d.MIGDevices)
	}
	want := []string{"1g.10gb", "1g.10gb", "3g.40gb"}
	for i, md := range d.MIGDevices {
		if md.Profile != want[i] || md.ParentUUID != d.UUID || md.UUID == "" {
			t.Errorf("mig %d: %+v", i, md)
		}
	}
	if d.MIGDevices[2].MemoryMiB != 40960 || d.MIGDevices[2].GISlices != 3 {
		t.Errorf("3g.40gb attrs %+v", d.MIGDevices[2])
	}
	again, _ := m.Devices(ctx)
	if again[0].MIGDevices[0].UUID != d.MIGDevices[0].UUID {
		t.Error("MIG UUIDs not stable across discoveries")
	}
}

func TestMockEventsAndFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, _ := NewMock("dgxh100", "n")
	uuid := m.UUIDs()[2]
	s, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := m.InjectXID(uuid, 79); err != nil {
		t.Fatal(err)
	}
	ev, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev.UUID != uuid || ev.Kind != EventXID || ev.XID != 79 || ev.GPUInstanceID != AllInstances {
		t.Fatalf("event %+v", ev)
	}
	if err := m.InjectECC(uuid, true); err != nil {
		t.Fatal(err)
	}
	if ev, _ := s.Next(ctx); ev.Kind != EventECCDoubleBit {
		t.Fatalf("event %+v", ev)
	}
	m.FailWait(gonvml.ERROR_UNKNOWN)
	if _, err := s.Next(ctx); !errors.Is(err, gonvml.ERROR_UNKNOWN) {
		t.Fatalf("wait error %v", err)
	}
	m.FailEventSetCreate(gonvml.ERROR_NOT_SUPPORTED)
	if _, err := m.Events(ctx); err == nil {
		t.Fatal("event set creation failure not reported")
	}

	if err := m.Probe(ctx, uuid); err != nil {
		t.Fatal(err)
	}
	m.SetLost(uuid, true)
	if err := m.Probe(ctx, uuid); !errors.Is(err, gonvml.ERROR_GPU_IS_LOST) {
		t.Fatalf("probe of lost GPU: %v", err)
	}
	if err := m.Probe(ctx, m.UUIDs()[3]); err != nil {
		t.Fatalf("other GPU affected: %v", err)
	}
	m.SetLost(uuid, false)
	if err := m.Probe(ctx, uuid); err != nil {
		t.Fatal(err)
	}
}

func TestNextHonoursContext(t *testing.T) {
	m, _ := NewMock("dgxa100", "n")
	s, err := m.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

func TestOpen(t *testing.T) {
	if _, err := Open(context.Background(), "mock:dgx-nope", "n", nil); err == nil {
		t.Error("unknown mock accepted")
	}
	if _, err := Open(context.Background(), "fake", "n", nil); err == nil {
		t.Error("unknown backend accepted")
	}
	lib, err := Open(context.Background(), "mock:dgxa100", "n", map[int][]string{1: {"3g.20gb"}})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := lib.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !devs[1].MIGEnabled || len(devs[1].MIGDevices) != 1 || devs[1].MIGDevices[0].Profile != "3g.20gb" {
		t.Fatalf("device 1: %+v", devs[1])
	}
}

// TestRealWithoutDriver runs where no NVIDIA driver is installed: NewReal
// must fail with a clear error, not crash.
func TestRealWithoutDriver(t *testing.T) {
	lib, err := NewReal("")
	if err == nil {
		lib.Close()
		t.Skip("an NVIDIA driver is installed here")
	}
	var nd *ErrNoDriver
	if !errors.As(err, &nd) {
		t.Fatalf("error %v is not *ErrNoDriver", err)
	}
	t.Log(err)
}

func TestMIGProfileName(t *testing.T) {
	for _, tc := range []struct {
		gi, ci int
		mem    uint64
		want   string
	}{
		{1, 1, 10240, "1g.10gb"},
		{1, 1, 4864, "1g.5gb"},
		{3, 3, 19968, "3g.20gb"},
		{2, 1, 20480, "1c.2g.20gb"},
	} {
		if got := MIGProfileName(tc.gi, tc.ci, tc.mem); got != tc.want {
			t.Errorf("MIGProfileName(%d,%d,%d) = %s, want %s", tc.gi, tc.ci, tc.mem, got, tc.want)
		}
	}
}
