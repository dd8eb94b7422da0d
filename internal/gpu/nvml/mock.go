package nvml

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	nvmlmock "github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
)

// uuidNamespace seeds the mock's deterministic UUIDs.
var uuidNamespace = uuid.MustParse("5f0c4a9e-7d55-4d3b-9a51-2f7b1e0c6a11")

// Mock is the mock backend: a go-nvml mock server with deterministic UUIDs
// (derived from a seed such as the node name), deterministic metrics, NUMA
// and NVLink topology, MIG device handles, and injectable events and faults.
type Mock struct {
	*adapter
	srv  *server.Server
	seed string

	mu        sync.Mutex
	lost      map[string]bool
	util      map[string]uint32
	sets      []*mockEventSet
	createErr gonvml.Return
	migs      map[migKey]*nvmlmock.Device
}

var _ Interface = (*Mock)(nil)

type migKey struct {
	parent int
	gi, ci uint32
}

// NewMock builds the mock server name (dgxa100, dgxh100, dgxh200 or dgxb200)
// with UUIDs derived from seed; the same seed gives the same UUIDs.
func NewMock(name, seed string) (*Mock, error) {
	var srv *server.Server
	switch name {
	case "dgxa100":
		srv = dgxa100.New()
	case "dgxh100":
		srv = dgxh100.New()
	case "dgxh200":
		srv = dgxh200.New()
	case "dgxb200":
		srv = dgxb200.New()
	default:
		return nil, fmt.Errorf("unknown NVML mock %q (one of dgxa100, dgxh100, dgxh200, dgxb200)", name)
	}
	if srv == nil {
		return nil, fmt.Errorf("building NVML mock %q", name)
	}
	m := &Mock{srv: srv, seed: seed, lost: map[string]bool{}, util: map[string]uint32{}, migs: map[migKey]*nvmlmock.Device{}, createErr: gonvml.SUCCESS}
	n := len(srv.Devices)
	for i, h := range srv.Devices {
		d := h.(*server.Device)
		d.UUID = "GPU-" + uuid.NewSHA1(uuidNamespace, []byte(fmt.Sprintf("%s/%s/%d", seed, name, i))).String()
		if b, ok := realBoards[name]; ok {
			d.GetNameFunc = func() (string, gonvml.Return) { return b.name, gonvml.SUCCESS }
			d.MemoryInfo.Total = b.memoryMiB << 20
		}
		m.decorate(d, i, n)
	}
	srv.EventSetCreateFunc = m.createEventSet
	m.adapter = &adapter{lib: srv, profileName: func(_, _ gonvml.Device, a gonvml.DeviceAttributes) string {
		return MIGProfileName(int(a.GpuInstanceSliceCount), int(a.ComputeInstanceSliceCount), a.MemorySizeMB)
	}}
	return m, nil
}

// realBoards corrects the stock mocks where they differ from what the real
// NVML reports for that board, so simulated nodes carry the labels real ones
// do: the values are what NVML reports on an H200 SXM with driver 580.159,
// and TestRealMatchesMock checks them against real hardware.
var realBoards = map[string]struct {
	name      string
	memoryMiB uint64
}{
	"dgxh200": {"NVIDIA H200", 143771},
}

// UUIDs returns the physical GPUs' UUIDs by index.
func (m *Mock) UUIDs() []string {
	out := make([]string, len(m.srv.Devices))
	for i, h := range m.srv.Devices {
		out[i] = h.(*server.Device).UUID
	}
	return out
}

// decorate sets the device calls the stock mock leaves unimplemented.
func (m *Mock) decorate(d *server.Device, i, n int) {
	mib := uint64(1024 * 1024)
	d.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
		if m.isLost(d.UUID) {
			return gonvml.Memory{}, gonvml.ERROR_GPU_IS_LOST
		}
		used := uint64(i+1) * 1024 * mib
		return gonvml.Memory{Total: d.MemoryInfo.Total, Used: used, Free: d.MemoryInfo.Total - used}, gonvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		if m.isLost(d.UUID) {
			return gonvml.Utilization{}, gonvml.ERROR_GPU_IS_LOST
		}
		if u, ok := m.utilization(d.UUID); ok {
			return gonvml.Utilization{Gpu: u, Memory: u / 2}, gonvml.SUCCESS
		}
		return gonvml.Utilization{Gpu: uint32(10*i) % 100, Memory: uint32(5*i) % 100}, gonvml.SUCCESS
	}
	d.GetTemperatureFunc = func(gonvml.TemperatureSensors) (uint32, gonvml.Return) {
		if m.isLost(d.UUID) {
			return 0, gonvml.ERROR_GPU_IS_LOST
		}
		return uint32(40 + i), gonvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return uint32(300000 + 1000*i), gonvml.SUCCESS }
	d.GetClockInfoFunc = func(gonvml.ClockType) (uint32, gonvml.Return) { return 1980, gonvml.SUCCESS }
	d.GetNumaNodeIdFunc = func() (int, gonvml.Return) {
		if i < n/2 {
			return 0, gonvml.SUCCESS
		}
		return 1, gonvml.SUCCESS
	}
	// DGX systems connect every GPU pair through NVSwitch.
	d.GetP2PStatusFunc = func(gonvml.Device, gonvml.GpuP2PCapsIndex) (gonvml.GpuP2PStatus, gonvml.Return) {
		return gonvml.P2P_STATUS_OK, gonvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
		p := gonvml.PciInfo{PciDeviceId: d.Config.PciDeviceId, Bus: uint32(i)}
		for k, c := range []byte(d.PciBusID) {
			if k < len(p.BusId)-1 {
				p.BusId[k] = int8(c)
			}
		}
		return p, gonvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, gonvml.Return) { return monitoredEvents, gonvml.SUCCESS }
	d.RegisterEventsFunc = func(uint64, gonvml.EventSet) gonvml.Return { return gonvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 7, gonvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(idx int) (gonvml.Device, gonvml.Return) {
		list := m.migHandles(d, i)
		if idx < 0 || idx >= len(list) {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return list[idx], gonvml.SUCCESS
	}
}

// migHandles lists the parent's MIG devices (GPU instance, then compute
// instance order), creating stable mock handles on first sight.
func (m *Mock) migHandles(d *server.Device, parent int) []gonvml.Device {
	type ciRef struct {
		gi *server.GpuInstance
		ci *server.ComputeInstance
	}
	var refs []ciRef
	d.RLock()
	for gi := range d.GpuInstances {
		gi.RLock()
		for ci := range gi.ComputeInstances {
			refs = append(refs, ciRef{gi, ci})
		}
		gi.RUnlock()
	}
	d.RUnlock()
	sort.Slice(refs, func(a, b int) bool {
		if refs[a].gi.Info.Id != refs[b].gi.Info.Id {
			return refs[a].gi.Info.Id < refs[b].gi.Info.Id
		}
		return refs[a].ci.Info.Id < refs[b].ci.Info.Id
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]gonvml.Device, 0, len(refs))
	for _, r := range refs {
		key := migKey{parent: parent, gi: r.gi.Info.Id, ci: r.ci.Info.Id}
		h, ok := m.migs[key]
		if !ok {
			h = m.newMIGHandle(d, key, r.gi.Info.ProfileId, r.ci.Info.ProfileId)
			m.migs[key] = h
		}
		out = append(out, h)
	}
	return out
}

func (m *Mock) newMIGHandle(d *server.Device, key migKey, giProfile, ciProfile uint32) *nvmlmock.Device {
	gp := d.Config.MIGProfiles.GpuInstanceProfiles[int(giProfile)]
	cp := d.Config.MIGProfiles.ComputeInstanceProfiles[int(giProfile)][int(ciProfile)]
	id := "MIG-" + uuid.NewSHA1(uuidNamespace, []byte(fmt.Sprintf("%s/%d/%d", d.UUID, key.gi, key.ci))).String()
	attrs := gonvml.DeviceAttributes{
		MultiprocessorCount:       cp.MultiprocessorCount,
		GpuInstanceSliceCount:     gp.SliceCount,
		ComputeInstanceSliceCount: cp.SliceCount,
		MemorySizeMB:              gp.MemorySizeMB,
	}
	if attrs.MultiprocessorCount == 0 {
		attrs.MultiprocessorCount = gp.MultiprocessorCount
	}
	return &nvmlmock.Device{
		GetUUIDFunc:                            func() (string, gonvml.Return) { return id, gonvml.SUCCESS },
		GetAttributesFunc:                      func() (gonvml.DeviceAttributes, gonvml.Return) { return attrs, gonvml.SUCCESS },
		GetGpuInstanceIdFunc:                   func() (int, gonvml.Return) { return int(key.gi), gonvml.SUCCESS },
		GetComputeInstanceIdFunc:               func() (int, gonvml.Return) { return int(key.ci), gonvml.SUCCESS },
		IsMigDeviceHandleFunc:                  func() (bool, gonvml.Return) { return true, gonvml.SUCCESS },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (gonvml.Device, gonvml.Return) { return d, gonvml.SUCCESS },
		GetMemoryInfoFunc: func() (gonvml.Memory, gonvml.Return) {
			return gonvml.Memory{Total: gp.MemorySizeMB * 1024 * 1024}, gonvml.SUCCESS
		},
	}
}

// EnableMIG turns MIG mode on for the GPU at index and creates one GPU
// instance with a full-size compute instance per profile (e.g. "1g.10gb").
func (m *Mock) EnableMIG(index int, profiles ...string) error {
	if index < 0 || index >= len(m.srv.Devices) {
		return fmt.Errorf("enabling MIG: no GPU %d", index)
	}
	d := m.srv.Devices[index].(*server.Device)
	if ret, _ := d.SetMigMode(gonvml.DEVICE_MIG_ENABLE); ret != gonvml.SUCCESS {
		return retErr("enabling MIG mode", ret)
	}
	ids := make([]int, 0, len(d.Config.MIGProfiles.GpuInstanceProfiles))
	for id := range d.Config.MIGProfiles.GpuInstanceProfiles {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, want := range profiles {
		found := false
		for _, id := range ids {
			info := d.Config.MIGProfiles.GpuInstanceProfiles[id]
			if MIGProfileName(int(info.SliceCount), int(info.SliceCount), info.MemorySizeMB) != want {
				continue
			}
			gi, ret := d.CreateGpuInstance(&info)
			if ret != gonvml.SUCCESS {
				return retErr("creating GPU instance "+want, ret)
			}
			var ci *gonvml.ComputeInstanceProfileInfo
			for _, cp := range d.Config.MIGProfiles.ComputeInstanceProfiles[id] {
				if cp.SliceCount == info.SliceCount {
					cp := cp
					ci = &cp
					break
				}
			}
			if ci == nil {
				return fmt.Errorf("creating compute instance for %s: no full-size profile", want)
			}
			if _, ret := gi.CreateComputeInstance(ci); ret != gonvml.SUCCESS {
				return retErr("creating compute instance "+want, ret)
			}
			found = true
			break
		}
		if !found {
			return fmt.Errorf("enabling MIG on GPU %d: no profile %q on %s", index, want, d.Config.Name)
		}
	}
	return nil
}

// SetLost makes the GPU fail (GPU_IS_LOST) memory, utilization and
// temperature queries, so Probe and Sample fail, until SetLost(uuid, false).
func (m *Mock) SetLost(uuid string, lost bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lost[uuid] = lost
}

// SetUtilization makes the GPU report gpu percent utilization (and half
// that memory-copy utilization) instead of its fixed figure, as a GPU under
// that load would; ok is false for a GPU the mock does not have.
func (m *Mock) SetUtilization(uuid string, gpu uint32) (ok bool) {
	if !m.known(uuid) {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.util[uuid] = min(gpu, 100)
	return true
}

func (m *Mock) utilization(uuid string) (uint32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.util[uuid]
	return u, ok
}

func (m *Mock) isLost(uuid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lost[uuid]
}

// FailEventSetCreate makes the next Events calls fail with ret (SUCCESS clears it).
func (m *Mock) FailEventSetCreate(ret gonvml.Return) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.createErr = ret
}

// InjectXID pushes an XID event for the whole GPU with uuid into every open event stream.
func (m *Mock) InjectXID(uuid string, xid uint64) error {
	return m.inject(uuid, gonvml.EventTypeXidCriticalError, xid)
}

// InjectECC pushes an ECC event (double bit when double) for the GPU with uuid.
func (m *Mock) InjectECC(uuid string, double bool) error {
	t := uint64(gonvml.EventTypeSingleBitEccError)
	if double {
		t = gonvml.EventTypeDoubleBitEccError
	}
	return m.inject(uuid, t, 0)
}

func (m *Mock) inject(uuid string, eventType, data uint64) error {
	h, ret := m.srv.DeviceGetHandleByUUID(uuid)
	if ret != gonvml.SUCCESS {
		return retErr("injecting event on "+uuid, ret)
	}
	ev := gonvml.EventData{Device: h, EventType: eventType, EventData: data, GpuInstanceId: AllInstances, ComputeInstanceId: AllInstances}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.sets) == 0 {
		return fmt.Errorf("injecting event on %s: no open event stream", uuid)
	}
	for _, s := range m.sets {
		select {
		case s.events <- ev:
		default:
			return fmt.Errorf("injecting event on %s: event queue full", uuid)
		}
	}
	return nil
}

// FailWait makes the next Wait on every open event set return ret.
func (m *Mock) FailWait(ret gonvml.Return) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sets {
		select {
		case s.failures <- ret:
		default:
		}
	}
}

// OpenEventStreams returns how many event sets are open (for tests waiting on a monitor).
func (m *Mock) OpenEventStreams() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sets)
}

type mockEventSet struct {
	nvmlmock.EventSet
	events   chan gonvml.EventData
	failures chan gonvml.Return
}

func (m *Mock) createEventSet() (gonvml.EventSet, gonvml.Return) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.createErr != gonvml.SUCCESS {
		return nil, m.createErr
	}
	s := &mockEventSet{events: make(chan gonvml.EventData, 256), failures: make(chan gonvml.Return, 1)}
	s.WaitFunc = func(timeoutMs uint32) (gonvml.EventData, gonvml.Return) {
		t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
		defer t.Stop()
		select {
		case ret := <-s.failures:
			return gonvml.EventData{}, ret
		case ev := <-s.events:
			return ev, gonvml.SUCCESS
		case <-t.C:
			return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
		}
	}
	s.FreeFunc = func() gonvml.Return {
		m.mu.Lock()
		defer m.mu.Unlock()
		for i, o := range m.sets {
			if o == s {
				m.sets = append(m.sets[:i], m.sets[i+1:]...)
				break
			}
		}
		return gonvml.SUCCESS
	}
	m.sets = append(m.sets, s)
	return s, gonvml.SUCCESS
}

// Open returns the backend named by spec: "real" or "mock:<name>"; seed
// derives the mock's UUIDs (use the node name). migByIndex creates MIG
// devices on the mock.
func Open(ctx context.Context, spec, seed string, migByIndex map[int][]string) (Interface, error) {
	if spec == "real" {
		return NewReal("")
	}
	const prefix = "mock:"
	if len(spec) > len(prefix) && spec[:len(prefix)] == prefix {
		m, err := NewMock(spec[len(prefix):], seed)
		if err != nil {
			return nil, err
		}
		idx := make([]int, 0, len(migByIndex))
		for i := range migByIndex {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		for _, i := range idx {
			if err := m.EnableMIG(i, migByIndex[i]...); err != nil {
				return nil, err
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("unknown NVML backend %q (real or mock:<dgxa100|dgxh100|dgxh200|dgxb200>)", spec)
}
