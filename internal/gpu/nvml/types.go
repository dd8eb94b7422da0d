// Package nvml discovers NVIDIA GPUs and reads their state through NVML
// (github.com/NVIDIA/go-nvml) behind the small Interface below.
//
// Two backends implement it with the same adapter code: the real NVML
// library, loaded at run time (NewReal), and go-nvml's mock servers
// (NewMock: dgxa100, dgxh100, dgxh200, dgxb200) for tests and simulated
// fleets. The mock adds deterministic UUIDs and metrics, MIG device handles,
// and an event set that tests can push XID events into.
package nvml

import (
	"context"
	"fmt"
)

// Interface is what the agent needs from NVML. Implementations are safe for
// concurrent use.
type Interface interface {
	// System returns driver and CUDA versions.
	System(ctx context.Context) (System, error)
	// Devices returns the GPUs ordered by index; each call queries NVML anew.
	// MIG devices are filled in for GPUs with MIG mode enabled.
	Devices(ctx context.Context) ([]Device, error)
	// Sample reads the current metrics of the GPU (or MIG device's parent) with uuid.
	Sample(ctx context.Context, uuid string) (Sample, error)
	// Probe returns nil when the GPU with uuid answers NVML queries (is usable),
	// and an error saying why not otherwise.
	Probe(ctx context.Context, uuid string) error
	// Events subscribes to XID and ECC events on all GPUs. The stream must be
	// closed by the caller. An error means the subscription could not start.
	Events(ctx context.Context) (EventStream, error)
	// Close releases NVML; the Interface must not be used afterwards.
	Close() error
}

// EventStream delivers GPU events.
type EventStream interface {
	// Next blocks until an event arrives. It returns ctx.Err() when ctx ends,
	// and any other error when waiting itself failed; such an error says
	// nothing about any device's health.
	Next(ctx context.Context) (Event, error)
	// Close stops the stream; it is idempotent.
	Close() error
}

// System holds node-wide versions.
type System struct {
	// DriverVersion is the kernel driver version, e.g. "550.54.15".
	DriverVersion string `json:"driverVersion"`
	// CUDADriverVersion is the CUDA API version the driver supports, NVML-encoded (12040 = 12.4).
	CUDADriverVersion int `json:"cudaDriverVersion"`
	// NVMLVersion is NVML's own version string.
	NVMLVersion string `json:"nvmlVersion"`
}

// CUDAVersion splits CUDADriverVersion into major and minor.
func (s System) CUDAVersion() (major, minor int) {
	return s.CUDADriverVersion / 1000, (s.CUDADriverVersion % 1000) / 10
}

// Device is one physical GPU.
type Device struct {
	Index int `json:"index"`
	// Minor is the GPU's device-node minor number (/dev/nvidia<Minor>), -1 when unknown.
	Minor        int    `json:"minor"`
	UUID         string `json:"uuid"`
	Name         string `json:"name"`
	MemoryMiB    uint64 `json:"memoryMiB"`
	ComputeMajor int    `json:"computeMajor"`
	ComputeMinor int    `json:"computeMinor"`
	// Architecture is NVML's architecture in lower case, e.g. "hopper"; "" when unknown.
	Architecture string `json:"architecture,omitempty"`
	// Family is the GFD family name derived from the compute capability, e.g. "hopper".
	Family   string `json:"family"`
	PCIBusID string `json:"pciBusID,omitempty"`
	// NUMANode is the GPU's NUMA node, -1 when unknown.
	NUMANode int `json:"numaNode"`
	// NVLinkPeers are the indices of GPUs reachable over NVLink (P2P over NVLink OK).
	NVLinkPeers []int       `json:"nvlinkPeers,omitempty"`
	MIGCapable  bool        `json:"migCapable"`
	MIGEnabled  bool        `json:"migEnabled"`
	MIGDevices  []MIGDevice `json:"migDevices,omitempty"`
}

// MIGDevice is one MIG device (a compute instance in a GPU instance).
type MIGDevice struct {
	UUID        string `json:"uuid"`
	ParentUUID  string `json:"parentUUID"`
	ParentIndex int    `json:"parentIndex"`
	// Profile is the MIG profile name, e.g. "1g.10gb" or "1c.2g.20gb".
	Profile           string `json:"profile"`
	GPUInstanceID     int    `json:"gpuInstanceID"`
	ComputeInstanceID int    `json:"computeInstanceID"`
	GISlices          int    `json:"giSlices"`
	CISlices          int    `json:"ciSlices"`
	MemoryMiB         uint64 `json:"memoryMiB"`
	Multiprocessors   int    `json:"multiprocessors"`
}

// Sample is one reading of a GPU's metrics.
type Sample struct {
	GPUUtil     uint32  `json:"gpuUtil"`     // percent
	MemCopyUtil uint32  `json:"memCopyUtil"` // percent
	FBUsedMiB   uint64  `json:"fbUsedMiB"`
	FBFreeMiB   uint64  `json:"fbFreeMiB"`
	TempC       uint32  `json:"tempC"`
	PowerW      float64 `json:"powerW"`
	SMClockMHz  uint32  `json:"smClockMHz"`
}

// EventKind classifies an NVML event.
type EventKind string

const (
	EventXID          EventKind = "XID"
	EventECCDoubleBit EventKind = "ECCDoubleBit"
	EventECCSingleBit EventKind = "ECCSingleBit"
)

// AllInstances is NVML's "whole GPU" value for GPU/compute instance IDs in events.
const AllInstances = ^uint32(0)

// Event is one NVML event on a GPU.
type Event struct {
	// UUID of the physical GPU.
	UUID string
	Kind EventKind
	// XID is the XID code for EventXID.
	XID uint64
	// GPUInstanceID and ComputeInstanceID narrow the event to a MIG device;
	// AllInstances means the whole GPU.
	GPUInstanceID     uint32
	ComputeInstanceID uint32
}

func (e Event) String() string {
	if e.Kind == EventXID {
		return fmt.Sprintf("XID %d on %s", e.XID, e.UUID)
	}
	return fmt.Sprintf("%s on %s", e.Kind, e.UUID)
}

// FamilyForComputeCapability returns the GFD family name for a compute capability.
func FamilyForComputeCapability(major, minor int) string {
	switch {
	case major >= 10:
		return "blackwell"
	case major == 9:
		return "hopper"
	case major == 8 && minor == 9:
		return "ada-lovelace"
	case major == 8:
		return "ampere"
	case major == 7 && minor == 5:
		return "turing"
	case major == 7:
		return "volta"
	case major == 6:
		return "pascal"
	case major == 5:
		return "maxwell"
	case major == 3:
		return "kepler"
	default:
		return "undefined"
	}
}

// MIGProfileName names a MIG device from its slices and memory; memoryMiB is
// rounded up to whole GiB ("1g.10gb", or "1c.2g.20gb" when the compute
// instance is smaller than its GPU instance).
func MIGProfileName(giSlices, ciSlices int, memoryMiB uint64) string {
	gb := (memoryMiB + 1023) / 1024
	if ciSlices > 0 && ciSlices < giSlices {
		return fmt.Sprintf("%dc.%dg.%dgb", ciSlices, giSlices, gb)
	}
	return fmt.Sprintf("%dg.%dgb", giSlices, gb)
}
