package nvml

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// monitoredEvents are the NVML event types the agent subscribes to.
const monitoredEvents = uint64(gonvml.EventTypeXidCriticalError | gonvml.EventTypeDoubleBitEccError | gonvml.EventTypeSingleBitEccError)

// eventWaitTimeoutMs bounds one NVML wait so that a cancelled context is noticed.
const eventWaitTimeoutMs = 500

// adapter implements Interface on top of any go-nvml Interface, real or mock.
type adapter struct {
	lib gonvml.Interface
	// profileName names a MIG device; it may use calls the mock does not implement.
	profileName func(parent, mig gonvml.Device, attrs gonvml.DeviceAttributes) string

	closeOnce sync.Once
	closeErr  error
}

var _ Interface = (*adapter)(nil)

func retErr(op string, ret gonvml.Return) error {
	return fmt.Errorf("%s: %w", op, ret)
}

func (a *adapter) System(ctx context.Context) (System, error) {
	var s System
	v, ret := a.lib.SystemGetDriverVersion()
	if ret != gonvml.SUCCESS {
		return s, retErr("getting driver version", ret)
	}
	s.DriverVersion = v
	cuda, ret := a.lib.SystemGetCudaDriverVersion()
	if ret != gonvml.SUCCESS {
		return s, retErr("getting CUDA driver version", ret)
	}
	s.CUDADriverVersion = cuda
	if nv, ret := a.lib.SystemGetNVMLVersion(); ret == gonvml.SUCCESS {
		s.NVMLVersion = nv
	}
	return s, nil
}

func (a *adapter) handles() ([]gonvml.Device, error) {
	n, ret := a.lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return nil, retErr("counting GPUs", ret)
	}
	out := make([]gonvml.Device, 0, n)
	for i := 0; i < n; i++ {
		d, ret := a.lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			return nil, retErr(fmt.Sprintf("getting GPU %d", i), ret)
		}
		out = append(out, d)
	}
	return out, nil
}

func (a *adapter) Devices(ctx context.Context) ([]Device, error) {
	hs, err := a.handles()
	if err != nil {
		return nil, err
	}
	devs := make([]Device, 0, len(hs))
	for i, h := range hs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, err := a.describe(i, h)
		if err != nil {
			return nil, fmt.Errorf("describing GPU %d: %w", i, err)
		}
		devs = append(devs, d)
	}
	// NVLink peers: P2P status over NVLink for every pair.
	for i := range hs {
		for j := range hs {
			if i == j {
				continue
			}
			st, ret := hs[i].GetP2PStatus(hs[j], gonvml.P2P_CAPS_INDEX_NVLINK)
			if ret == gonvml.SUCCESS && st == gonvml.P2P_STATUS_OK {
				devs[i].NVLinkPeers = append(devs[i].NVLinkPeers, devs[j].Index)
			}
		}
	}
	return devs, nil
}

func (a *adapter) describe(pos int, h gonvml.Device) (Device, error) {
	d := Device{Index: pos, Minor: -1, NUMANode: -1}
	if idx, ret := h.GetIndex(); ret == gonvml.SUCCESS {
		d.Index = idx
	}
	if minor, ret := h.GetMinorNumber(); ret == gonvml.SUCCESS {
		d.Minor = minor
	}
	var ret gonvml.Return
	if d.UUID, ret = h.GetUUID(); ret != gonvml.SUCCESS {
		return d, retErr("getting UUID", ret)
	}
	if d.Name, ret = h.GetName(); ret != gonvml.SUCCESS {
		return d, retErr("getting name", ret)
	}
	mem, ret := h.GetMemoryInfo()
	if ret != gonvml.SUCCESS {
		return d, retErr("getting memory info", ret)
	}
	d.MemoryMiB = mem.Total / (1024 * 1024)
	if d.ComputeMajor, d.ComputeMinor, ret = h.GetCudaComputeCapability(); ret != gonvml.SUCCESS {
		return d, retErr("getting compute capability", ret)
	}
	d.Family = FamilyForComputeCapability(d.ComputeMajor, d.ComputeMinor)
	if arch, ret := h.GetArchitecture(); ret == gonvml.SUCCESS {
		d.Architecture = architectureName(arch)
	}
	if pci, ret := h.GetPciInfo(); ret == gonvml.SUCCESS {
		d.PCIBusID = cString(pci.BusId[:])
	}
	if numa, ret := h.GetNumaNodeId(); ret == gonvml.SUCCESS {
		d.NUMANode = numa
	}
	current, _, ret := h.GetMigMode()
	switch ret {
	case gonvml.SUCCESS:
		d.MIGCapable = true
		d.MIGEnabled = current == gonvml.DEVICE_MIG_ENABLE
	case gonvml.ERROR_NOT_SUPPORTED:
	default:
		return d, retErr("getting MIG mode", ret)
	}
	if d.MIGEnabled {
		migs, err := a.migDevices(d, h)
		if err != nil {
			return d, err
		}
		d.MIGDevices = migs
	}
	return d, nil
}

func (a *adapter) migDevices(parent Device, h gonvml.Device) ([]MIGDevice, error) {
	n, ret := h.GetMaxMigDeviceCount()
	if ret != gonvml.SUCCESS {
		return nil, retErr("getting max MIG device count", ret)
	}
	var out []MIGDevice
	for i := 0; i < n; i++ {
		m, ret := h.GetMigDeviceHandleByIndex(i)
		if ret == gonvml.ERROR_NOT_FOUND || ret == gonvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != gonvml.SUCCESS {
			return nil, retErr(fmt.Sprintf("getting MIG device %d", i), ret)
		}
		md := MIGDevice{ParentUUID: parent.UUID, ParentIndex: parent.Index}
		if md.UUID, ret = m.GetUUID(); ret != gonvml.SUCCESS {
			return nil, retErr("getting MIG device UUID", ret)
		}
		attrs, ret := m.GetAttributes()
		if ret != gonvml.SUCCESS {
			return nil, retErr("getting MIG device attributes", ret)
		}
		md.GISlices = int(attrs.GpuInstanceSliceCount)
		md.CISlices = int(attrs.ComputeInstanceSliceCount)
		md.MemoryMiB = attrs.MemorySizeMB
		md.Multiprocessors = int(attrs.MultiprocessorCount)
		if md.GPUInstanceID, ret = m.GetGpuInstanceId(); ret != gonvml.SUCCESS {
			return nil, retErr("getting GPU instance ID", ret)
		}
		if md.ComputeInstanceID, ret = m.GetComputeInstanceId(); ret != gonvml.SUCCESS {
			return nil, retErr("getting compute instance ID", ret)
		}
		md.Profile = a.profileName(h, m, attrs)
		out = append(out, md)
	}
	return out, nil
}

func (a *adapter) handleByUUID(uuid string) (gonvml.Device, error) {
	h, ret := a.lib.DeviceGetHandleByUUID(uuid)
	if ret != gonvml.SUCCESS {
		return nil, retErr("getting GPU "+uuid, ret)
	}
	return h, nil
}

func (a *adapter) Sample(ctx context.Context, uuid string) (Sample, error) {
	var s Sample
	h, err := a.handleByUUID(uuid)
	if err != nil {
		return s, err
	}
	if u, ret := h.GetUtilizationRates(); ret == gonvml.SUCCESS {
		s.GPUUtil, s.MemCopyUtil = u.Gpu, u.Memory
	} else if ret != gonvml.ERROR_NOT_SUPPORTED {
		return s, retErr("getting utilization of "+uuid, ret)
	}
	mem, ret := h.GetMemoryInfo()
	if ret != gonvml.SUCCESS {
		return s, retErr("getting memory of "+uuid, ret)
	}
	s.FBUsedMiB, s.FBFreeMiB = mem.Used/(1024*1024), mem.Free/(1024*1024)
	if t, ret := h.GetTemperature(gonvml.TEMPERATURE_GPU); ret == gonvml.SUCCESS {
		s.TempC = t
	}
	if p, ret := h.GetPowerUsage(); ret == gonvml.SUCCESS {
		s.PowerW = float64(p) / 1000
	}
	if c, ret := h.GetClockInfo(gonvml.CLOCK_SM); ret == gonvml.SUCCESS {
		s.SMClockMHz = c
	}
	return s, nil
}

func (a *adapter) Probe(ctx context.Context, uuid string) error {
	h, err := a.handleByUUID(uuid)
	if err != nil {
		return err
	}
	if _, ret := h.GetMemoryInfo(); ret != gonvml.SUCCESS {
		return retErr("probing memory of "+uuid, ret)
	}
	if _, ret := h.GetTemperature(gonvml.TEMPERATURE_GPU); ret != gonvml.SUCCESS && ret != gonvml.ERROR_NOT_SUPPORTED {
		return retErr("probing temperature of "+uuid, ret)
	}
	return nil
}

func (a *adapter) Events(ctx context.Context) (EventStream, error) {
	set, ret := a.lib.EventSetCreate()
	if ret != gonvml.SUCCESS {
		return nil, retErr("creating NVML event set", ret)
	}
	hs, err := a.handles()
	if err != nil {
		set.Free()
		return nil, err
	}
	uuids := map[gonvml.Device]string{}
	registered := 0
	var errs []error
	for i, h := range hs {
		uuid, ret := h.GetUUID()
		if ret != gonvml.SUCCESS {
			errs = append(errs, retErr(fmt.Sprintf("getting UUID of GPU %d", i), ret))
			continue
		}
		types := monitoredEvents
		if supported, ret := h.GetSupportedEventTypes(); ret == gonvml.SUCCESS {
			types &= supported
		}
		if ret := h.RegisterEvents(types, set); ret != gonvml.SUCCESS {
			errs = append(errs, retErr("registering events on "+uuid, ret))
			continue
		}
		uuids[h] = uuid
		registered++
	}
	if registered == 0 && len(hs) > 0 {
		set.Free()
		return nil, fmt.Errorf("no GPU accepted event registration: %w", errors.Join(errs...))
	}
	return &eventStream{set: set, uuids: uuids, adapter: a}, nil
}

func (a *adapter) Close() error {
	a.closeOnce.Do(func() {
		if ret := a.lib.Shutdown(); ret != gonvml.SUCCESS {
			a.closeErr = retErr("shutting down NVML", ret)
		}
	})
	return a.closeErr
}

type eventStream struct {
	set     gonvml.EventSet
	uuids   map[gonvml.Device]string
	adapter *adapter

	// waitMu is held during one Wait so that Close never frees the set under it.
	waitMu sync.Mutex
	closed bool
}

var _ EventStream = (*eventStream)(nil)

func (s *eventStream) Next(ctx context.Context) (Event, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Event{}, err
		}
		s.waitMu.Lock()
		if s.closed {
			s.waitMu.Unlock()
			return Event{}, errors.New("event stream closed")
		}
		data, ret := s.set.Wait(eventWaitTimeoutMs)
		s.waitMu.Unlock()
		switch ret {
		case gonvml.SUCCESS:
		case gonvml.ERROR_TIMEOUT:
			continue
		default:
			return Event{}, retErr("waiting for NVML events", ret)
		}
		ev := Event{GPUInstanceID: data.GpuInstanceId, ComputeInstanceID: data.ComputeInstanceId}
		if uuid, ok := s.uuids[data.Device]; ok {
			ev.UUID = uuid
		} else if data.Device != nil {
			if uuid, ret := data.Device.GetUUID(); ret == gonvml.SUCCESS {
				ev.UUID = uuid
			}
		}
		switch {
		case data.EventType&gonvml.EventTypeXidCriticalError != 0:
			ev.Kind, ev.XID = EventXID, data.EventData
		case data.EventType&gonvml.EventTypeDoubleBitEccError != 0:
			ev.Kind = EventECCDoubleBit
		case data.EventType&gonvml.EventTypeSingleBitEccError != 0:
			ev.Kind = EventECCSingleBit
		default:
			continue
		}
		return ev, nil
	}
}

func (s *eventStream) Close() error {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if ret := s.set.Free(); ret != gonvml.SUCCESS {
		return retErr("freeing NVML event set", ret)
	}
	return nil
}

func architectureName(a gonvml.DeviceArchitecture) string {
	switch a {
	case gonvml.DEVICE_ARCH_KEPLER:
		return "kepler"
	case gonvml.DEVICE_ARCH_MAXWELL:
		return "maxwell"
	case gonvml.DEVICE_ARCH_PASCAL:
		return "pascal"
	case gonvml.DEVICE_ARCH_VOLTA:
		return "volta"
	case gonvml.DEVICE_ARCH_TURING:
		return "turing"
	case gonvml.DEVICE_ARCH_AMPERE:
		return "ampere"
	case gonvml.DEVICE_ARCH_ADA:
		return "ada-lovelace"
	case gonvml.DEVICE_ARCH_HOPPER:
		return "hopper"
	case gonvml.DEVICE_ARCH_BLACKWELL:
		return "blackwell"
	default:
		return ""
	}
}

func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}
