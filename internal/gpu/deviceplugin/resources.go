// Package deviceplugin advertises GPUs to the kubelet through the device
// plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1): one gRPC server
// per resource name (nvidia.com/gpu, nvidia.com/mig-<profile>, shared
// variants), registration with kubelet.sock and re-registration after a
// kubelet restart, health-driven ListAndWatch, preferred allocation policies,
// and a self-check against the Node's allocatable.
//
// What is advertised (BuildResources), which devices are preferred
// (Preferred) and what a container gets (ContainerResponse) are pure
// functions; Plugin and Manager do the I/O.
package deviceplugin

import (
	"fmt"
	"sort"
	"strings"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/nvml"
)

// GPUResource is the resource name of whole GPUs.
const GPUResource = "nvidia.com/gpu"

// MIGResource returns the mixed-strategy resource name of a MIG profile.
func MIGResource(profile string) string { return "nvidia.com/mig-" + profile }

// Device is one advertised device.
type Device struct {
	// ID is what the kubelet sees: a GPU or MIG UUID, or <uuid>::<n> for a replica.
	ID string
	// UUID is the GPU or MIG device handed to the container.
	UUID string
	// GPU is the physical GPU's UUID (health is tracked per physical GPU).
	GPU string
	// GPUIndex is the physical GPU's index (topology key).
	GPUIndex int
	// NUMANode is the physical GPU's NUMA node, -1 when unknown.
	NUMANode int
	// Replica is the replica number for shared devices, 0 otherwise.
	Replica int
}

// Resource is one advertised resource and its devices.
type Resource struct {
	Name    string
	Devices []Device
	// Replicas is the number of replicas per device; 1 when not shared.
	Replicas int
	// FailRequestsGreaterThanOne rejects Allocate of more than one shared device.
	FailRequestsGreaterThanOne bool
}

// Shared reports whether the resource's devices are time-sliced replicas.
func (r Resource) Shared() bool { return r.Replicas > 1 }

// ReplicaID names replica n of the device with uuid.
func ReplicaID(uuid string, n int) string { return fmt.Sprintf("%s::%d", uuid, n) }

// SplitReplicaID returns the device UUID of an advertised ID (the ID itself when not a replica).
func SplitReplicaID(id string) string {
	if i := strings.Index(id, "::"); i >= 0 {
		return id[:i]
	}
	return id
}

// Topology is the GPU interconnect used by preferred allocation, by GPU index.
type Topology struct {
	// NVLink[i][j] is true when GPUs i and j talk over NVLink.
	NVLink map[int]map[int]bool
	// NUMA[i] is GPU i's NUMA node (absent or -1 when unknown).
	NUMA map[int]int
}

// TopologyOf extracts the topology NVML reported.
func TopologyOf(devs []nvml.Device) Topology {
	t := Topology{NVLink: map[int]map[int]bool{}, NUMA: map[int]int{}}
	for _, d := range devs {
		t.NUMA[d.Index] = d.NUMANode
		for _, p := range d.NVLinkPeers {
			if t.NVLink[d.Index] == nil {
				t.NVLink[d.Index] = map[int]bool{}
			}
			t.NVLink[d.Index][p] = true
		}
	}
	return t
}

// BuildResources decides what to advertise from the discovered GPUs, the MIG
// strategy and the time-slicing config. Resources are sorted by name.
func BuildResources(devs []nvml.Device, strategy gpuconfig.MIGStrategy, ts *gpuconfig.TimeSlicing) ([]Resource, error) {
	base := map[string][]Device{}
	whole := func(d nvml.Device) Device {
		return Device{ID: d.UUID, UUID: d.UUID, GPU: d.UUID, GPUIndex: d.Index, NUMANode: d.NUMANode}
	}
	mig := func(d nvml.Device, m nvml.MIGDevice) Device {
		return Device{ID: m.UUID, UUID: m.UUID, GPU: d.UUID, GPUIndex: d.Index, NUMANode: d.NUMANode}
	}
	switch strategy {
	case gpuconfig.MIGStrategyNone, "":
		for _, d := range devs {
			base[GPUResource] = append(base[GPUResource], whole(d))
		}
	case gpuconfig.MIGStrategySingle:
		var enabled, disabled int
		profiles := map[string]bool{}
		for _, d := range devs {
			if d.MIGEnabled {
				enabled++
				for _, m := range d.MIGDevices {
					profiles[m.Profile] = true
				}
			} else {
				disabled++
			}
		}
		switch {
		case enabled == 0:
			for _, d := range devs {
				base[GPUResource] = append(base[GPUResource], whole(d))
			}
		case disabled > 0:
			return nil, fmt.Errorf("MIG strategy single: %d GPUs have MIG enabled and %d do not; use mixed", enabled, disabled)
		case len(profiles) > 1:
			return nil, fmt.Errorf("MIG strategy single: GPUs use several MIG profiles %v; use mixed", sortedKeys(profiles))
		default:
			for _, d := range devs {
				for _, m := range d.MIGDevices {
					base[GPUResource] = append(base[GPUResource], mig(d, m))
				}
			}
		}
	case gpuconfig.MIGStrategyMixed:
		for _, d := range devs {
			if !d.MIGEnabled {
				base[GPUResource] = append(base[GPUResource], whole(d))
				continue
			}
			for _, m := range d.MIGDevices {
				name := MIGResource(m.Profile)
				base[name] = append(base[name], mig(d, m))
			}
		}
	default:
		return nil, fmt.Errorf("unknown MIG strategy %q", strategy)
	}

	shared := map[string]gpuconfig.ReplicatedResource{}
	if ts != nil {
		for _, r := range ts.Resources {
			shared[r.Name] = r
		}
	}
	byName := map[string]Resource{}
	for _, name := range sortedKeys(base) {
		devices := base[name]
		r, ok := shared[name]
		if !ok {
			byName[name] = Resource{Name: name, Devices: devices, Replicas: 1}
			continue
		}
		out := Resource{Name: gpuconfig.SharedResourceName(r, ts.RenameByDefault), Replicas: max(r.Replicas, 1), FailRequestsGreaterThanOne: ts.FailRequestsGreaterThanOne}
		for _, d := range devices {
			if out.Replicas == 1 {
				out.Devices = append(out.Devices, d)
				continue
			}
			for n := 0; n < out.Replicas; n++ {
				rd := d
				rd.ID, rd.Replica = ReplicaID(d.UUID, n), n
				out.Devices = append(out.Devices, rd)
			}
		}
		if prev, dup := byName[out.Name]; dup {
			return nil, fmt.Errorf("resources %s and %s are both advertised as %s", name, prev.Name, out.Name)
		}
		byName[out.Name] = out
	}
	res := make([]Resource, 0, len(byName))
	for _, n := range sortedKeys(byName) {
		res = append(res, byName[n])
	}
	return res, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
