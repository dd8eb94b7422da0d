// Package driver finds what the host's NVIDIA driver must put into a
// container for it to use GPUs, without the NVIDIA container toolkit: the
// device nodes of each GPU and MIG device, the driver's control nodes, its
// user-space libraries (found through the loader cache) and its tools. Edits
// then says, for a set of allocated devices, which device nodes, read-only
// mounts and environment one container gets; CDISpec says the same as a
// Container Device Interface spec.
//
// Discover does the I/O; Edits and CDISpec are pure.
package driver

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"fke.dev/fke/internal/gpu/hostlib"
	"fke.dev/fke/internal/gpu/nvml"
)

// Environment variables a container gets with its devices.
const (
	// VisibleDevicesEnv lists the allocated GPUs (NVIDIA container toolkit's variable).
	VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"
	// CUDAVisibleDevicesEnv lists them for CUDA (UUIDs, GPU-... or MIG-...).
	CUDAVisibleDevicesEnv = "CUDA_VISIBLE_DEVICES"
)

// controlNodes are the driver's devices every GPU container needs, where
// the host has them.
var controlNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}

// libraryPrefixes select the driver's libraries among the loader cache's
// entries (the user-space half of the driver, whatever its version).
var libraryPrefixes = []string{
	"libcuda.", "libcudadebugger.", "libnvidia-", "libnvcuvid.", "libnvoptix.",
	"libGLX_nvidia.", "libEGL_nvidia.", "libGLESv1_CM_nvidia.", "libGLESv2_nvidia.",
}

// tools are the driver's programs a container may run, looked up in toolDirs;
// the first that is an ELF program counts (a host's wrapper script of the same
// name cannot run in a container, which has neither its shell nor its target).
var (
	tools    = []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}
	toolDirs = []string{"/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin", "/usr/local/nvidia/bin"}
)

// Mount is a read-only bind mount of a host file into a container.
type Mount struct {
	// HostPath is the file on the host (symlinks resolved).
	HostPath string `json:"hostPath"`
	// ContainerPath is where the container sees it.
	ContainerPath string `json:"containerPath"`
}

// Driver is what the host's driver offers containers. The zero Driver is a
// host without a driver (simulated GPUs): containers get the environment only.
type Driver struct {
	// Control are the control nodes present on the host (host paths).
	Control []string `json:"control,omitempty"`
	// Nodes are the device nodes by GPU or MIG device UUID (a MIG device
	// needs its parent GPU's node and its capability nodes).
	Nodes map[string][]string `json:"nodes,omitempty"`
	// Libraries are the driver's libraries, mounted where the host's
	// loader finds them.
	Libraries []Mount `json:"libraries,omitempty"`
	// Tools are the driver's programs (nvidia-smi, ...), mounted in /usr/bin.
	Tools []Mount `json:"tools,omitempty"`
}

// Simulated reports whether no GPU has a device node: the GPUs come from a
// mock (or the driver is not loaded), so containers get no devices.
func (d *Driver) Simulated() bool { return d == nil || len(d.Nodes) == 0 }

// Edits is what one container gets for its allocated devices.
type Edits struct {
	// DeviceNodes are host device paths, created at the same path inside.
	DeviceNodes []string
	// Mounts are read-only bind mounts.
	Mounts []Mount
	// Env is the environment to set.
	Env map[string]string
}

// Edits returns what a container allocated the devices with uuids (GPU or
// MIG UUIDs, in allocation order, without duplicates) gets: those devices'
// nodes and the control nodes, the driver's libraries and tools, and the
// two visible-devices variables. On a simulated driver only the variables.
func (d *Driver) Edits(uuids []string) Edits {
	list := strings.Join(uuids, ",")
	e := Edits{Env: map[string]string{VisibleDevicesEnv: list, CUDAVisibleDevicesEnv: list}}
	if d.Simulated() || len(uuids) == 0 {
		return e
	}
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			e.DeviceNodes = append(e.DeviceNodes, p)
		}
	}
	for _, u := range uuids {
		for _, p := range d.Nodes[u] {
			add(p)
		}
	}
	for _, p := range d.Control {
		add(p)
	}
	e.Mounts = append(slices.Clone(d.Libraries), d.Tools...)
	return e
}

// Discover finds the driver of the host whose root filesystem is at root
// ("/" for an agent on the host, "/host" for one in a container with the
// host's root mounted there), for the GPUs devs. Returned paths are host
// paths (without root). A host without device nodes for devs returns the
// zero Driver; a missing loader cache only means no libraries.
func Discover(root string, devs []nvml.Device) (*Driver, error) {
	d := &Driver{Nodes: map[string][]string{}}
	for _, dev := range devs {
		minor := dev.Minor
		if minor < 0 {
			minor = dev.Index
		}
		gpuNode := "/dev/nvidia" + strconv.Itoa(minor)
		if !exists(root, gpuNode) {
			continue
		}
		d.Nodes[dev.UUID] = []string{gpuNode}
		for _, mig := range dev.MIGDevices {
			caps, err := migCapabilities(root, minor, mig)
			if err != nil {
				return nil, fmt.Errorf("MIG device %s: %w", mig.UUID, err)
			}
			d.Nodes[mig.UUID] = append([]string{gpuNode}, caps...)
		}
	}
	if len(d.Nodes) == 0 {
		return &Driver{}, nil
	}
	for _, c := range controlNodes {
		if exists(root, c) {
			d.Control = append(d.Control, c)
		}
	}
	libs, err := libraries(root)
	if err != nil {
		return nil, err
	}
	d.Libraries = libs
	for _, t := range tools {
		for _, dir := range toolDirs {
			p := path.Join(dir, t)
			if real, err := hostlib.Resolve(root, p); err == nil && isELF(filepath.Join(root, real)) {
				d.Tools = append(d.Tools, Mount{HostPath: real, ContainerPath: path.Join("/usr/bin", t)})
				break
			}
		}
	}
	return d, nil
}

// libraries returns the driver's libraries listed in root's loader cache.
func libraries(root string) ([]Mount, error) {
	entries, err := hostlib.ReadCache(filepath.Join(root, "etc", "ld.so.cache"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Mount
	seen := map[string]bool{}
	for _, e := range entries {
		if !e.Native() || seen[e.Path] || !isDriverLibrary(e.Name) {
			continue
		}
		real, err := hostlib.Resolve(root, e.Path)
		if err != nil {
			continue // a stale cache entry
		}
		seen[e.Path] = true
		out = append(out, Mount{HostPath: real, ContainerPath: e.Path})
	}
	slices.SortFunc(out, func(a, b Mount) int { return strings.Compare(a.ContainerPath, b.ContainerPath) })
	return out, nil
}

func isDriverLibrary(soname string) bool {
	for _, p := range libraryPrefixes {
		if strings.HasPrefix(soname, p) {
			return true
		}
	}
	return false
}

// migCapabilities returns the capability device nodes that give access to
// mig's GPU instance and compute instance on the GPU with minor, as the
// driver lists them in /proc/driver/nvidia/capabilities.
func migCapabilities(root string, minor int, mig nvml.MIGDevice) ([]string, error) {
	base := fmt.Sprintf("/proc/driver/nvidia/capabilities/gpu%d/mig/gi%d", minor, mig.GPUInstanceID)
	var out []string
	for _, access := range []string{base + "/access", fmt.Sprintf("%s/ci%d/access", base, mig.ComputeInstanceID)} {
		n, err := capabilityMinor(filepath.Join(root, access))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a driver without MIG capabilities (or no /proc view)
		}
		if err != nil {
			return nil, err
		}
		p := fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", n)
		if exists(root, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// capabilityMinor reads "DeviceFileMinor: N" from a capability access file.
func capabilityMinor(file string) (int, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == "DeviceFileMinor" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("%s: bad DeviceFileMinor %q", file, v)
			}
			return n, nil
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no DeviceFileMinor", file)
}

// isELF says whether the file at p starts with the ELF magic number.
func isELF(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, len(elf.ELFMAG))
	_, err = io.ReadFull(f, magic)
	return err == nil && string(magic) == elf.ELFMAG
}

func exists(root, p string) bool {
	_, err := os.Stat(filepath.Join(root, p))
	return err == nil
}
