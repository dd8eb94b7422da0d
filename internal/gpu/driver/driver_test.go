package driver

import (
	"debug/elf"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"fke.dev/fke/internal/gpu/hostlib"
	"fke.dev/fke/internal/gpu/nvml"
)

// hostRoot builds a host filesystem with a driver: GPUs with minors 0 and
// 1 (the second with a MIG device), control nodes, a merged /usr (/lib is a
// symlink to usr/lib), libraries behind soname symlinks, an i386 copy and
// an unrelated library in the loader cache, nvidia-smi as a program in
// /usr/local/nvidia/bin behind a wrapper script in /usr/bin, and
// nvidia-debugdump as a script only.
func hostRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	file := func(p, content string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"} {
		file(d, "")
	}
	file("/proc/driver/nvidia/capabilities/gpu1/mig/gi3/access", "DeviceFileMinor: 21\nDeviceFileMode: 292\n")
	file("/proc/driver/nvidia/capabilities/gpu1/mig/gi3/ci0/access", "DeviceFileMinor: 22\n")
	file("/usr/lib/x86_64-linux-gnu/libcuda.so.560.35.03", "cuda")
	link("libcuda.so.560.35.03", "/usr/lib/x86_64-linux-gnu/libcuda.so.1")
	file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.560.35.03", "nvml")
	link("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.560.35.03", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
	file("/usr/lib/i386-linux-gnu/libcuda.so.1", "cuda32")
	file("/usr/lib/x86_64-linux-gnu/libz.so.1", "zlib")
	link("usr/lib", "/lib")
	file("/usr/bin/nvidia-smi", "#!/bin/sh\nexec /usr/local/nvidia/bin/nvidia-smi \"$@\"\n")
	file("/usr/local/nvidia/bin/nvidia-smi", elf.ELFMAG+"smi")
	file("/usr/bin/nvidia-debugdump", "#!/bin/sh\n")
	arch := hostlib.NativeFlags()
	cache := hostlib.EncodeCache([]hostlib.CacheEntry{
		{Name: "libcuda.so.1", Path: "/lib/x86_64-linux-gnu/libcuda.so.1", Flags: arch},
		{Name: "libcuda.so.1", Path: "/usr/lib/i386-linux-gnu/libcuda.so.1", Flags: 0x0003}, // libc6 ELF, no architecture bits: not this process's
		{Name: "libnvidia-ml.so.1", Path: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", Flags: arch},
		{Name: "libnvidia-gone.so.1", Path: "/usr/lib/x86_64-linux-gnu/libnvidia-gone.so.1", Flags: arch},
		{Name: "libz.so.1", Path: "/usr/lib/x86_64-linux-gnu/libz.so.1", Flags: arch},
	})
	file("/etc/ld.so.cache", string(cache))
	return root
}

var hostGPUs = []nvml.Device{
	{Index: 0, Minor: 0, UUID: "GPU-a"},
	{Index: 1, Minor: 1, UUID: "GPU-b", MIGEnabled: true, MIGDevices: []nvml.MIGDevice{{UUID: "MIG-b1", GPUInstanceID: 3, ComputeInstanceID: 0}}},
	{Index: 2, Minor: 7, UUID: "GPU-c"}, // no /dev/nvidia7: not usable in containers
}

func TestDiscover(t *testing.T) {
	root := hostRoot(t)
	d, err := Discover(root, hostGPUs)
	if err != nil {
		t.Fatal(err)
	}
	want := &Driver{
		Control: []string{"/dev/nvidiactl", "/dev/nvidia-uvm"},
		Nodes: map[string][]string{
			"GPU-a":  {"/dev/nvidia0"},
			"GPU-b":  {"/dev/nvidia1"},
			"MIG-b1": {"/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"},
		},
		Libraries: []Mount{
			{HostPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.560.35.03", ContainerPath: "/lib/x86_64-linux-gnu/libcuda.so.1"},
			{HostPath: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.560.35.03", ContainerPath: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"},
		},
		Tools: []Mount{{HostPath: "/usr/local/nvidia/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi"}},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Discover:\n got %+v\nwant %+v", d, want)
	}
	if d.Simulated() {
		t.Error("a driver with device nodes is Simulated")
	}
}

func TestDiscoverWithoutDeviceNodes(t *testing.T) {
	// A mock backend's GPUs, or a host whose driver is not loaded.
	d, err := Discover(t.TempDir(), hostGPUs)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Simulated() {
		t.Errorf("no device nodes, but not Simulated: %+v", d)
	}
}

func TestEdits(t *testing.T) {
	d, err := Discover(hostRoot(t), hostGPUs)
	if err != nil {
		t.Fatal(err)
	}
	libsAndTools := append(append([]Mount{}, d.Libraries...), d.Tools...)
	for _, tc := range []struct {
		name   string
		driver *Driver
		uuids  []string
		want   Edits
	}{{
		name: "one GPU: its node, the control nodes, libraries and tools", driver: d, uuids: []string{"GPU-b"},
		want: Edits{
			DeviceNodes: []string{"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"},
			Mounts:      libsAndTools,
			Env:         map[string]string{VisibleDevicesEnv: "GPU-b", CUDAVisibleDevicesEnv: "GPU-b"},
		},
	}, {
		name: "two GPUs, in allocation order", driver: d, uuids: []string{"GPU-b", "GPU-a"},
		want: Edits{
			DeviceNodes: []string{"/dev/nvidia1", "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"},
			Mounts:      libsAndTools,
			Env:         map[string]string{VisibleDevicesEnv: "GPU-b,GPU-a", CUDAVisibleDevicesEnv: "GPU-b,GPU-a"},
		},
	}, {
		name: "a MIG device: parent node and capability nodes", driver: d, uuids: []string{"MIG-b1"},
		want: Edits{
			DeviceNodes: []string{"/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22", "/dev/nvidiactl", "/dev/nvidia-uvm"},
			Mounts:      libsAndTools,
			Env:         map[string]string{VisibleDevicesEnv: "MIG-b1", CUDAVisibleDevicesEnv: "MIG-b1"},
		},
	}, {
		name: "simulated GPUs: the environment only", driver: &Driver{}, uuids: []string{"GPU-x", "GPU-y"},
		want: Edits{Env: map[string]string{VisibleDevicesEnv: "GPU-x,GPU-y", CUDAVisibleDevicesEnv: "GPU-x,GPU-y"}},
	}, {
		name: "nil driver: the environment only", driver: nil, uuids: []string{"GPU-x"},
		want: Edits{Env: map[string]string{VisibleDevicesEnv: "GPU-x", CUDAVisibleDevicesEnv: "GPU-x"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.driver.Edits(tc.uuids); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestLibraryPath(t *testing.T) {
	root := hostRoot(t)
	got, err := hostlib.LibraryPath(root, "libnvidia-ml.so.1")
	if want := filepath.Join(root, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.560.35.03"); err != nil || got != want {
		t.Errorf("LibraryPath = %q, %v; want %q", got, err, want)
	}
	if got, err := hostlib.LibraryPath(root, "libnvidia-nothing.so.1"); err == nil {
		t.Errorf("a library not in the cache: %q, no error", got)
	}
}

func TestResolve(t *testing.T) {
	root := hostRoot(t)
	for _, tc := range []struct{ in, want string }{
		{"/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.560.35.03"},
		{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.560.35.03"},
		{"/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"},
	} {
		if got, err := hostlib.Resolve(root, tc.in); err != nil || got != tc.want {
			t.Errorf("resolve(%s) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	// A loop and a link out of nowhere fail instead of spinning.
	if err := os.Symlink("loop", filepath.Join(root, "loop")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/loop", "/loop/x", "/usr/lib/x86_64-linux-gnu/nothing"} {
		if got, err := hostlib.Resolve(root, p); err == nil {
			t.Errorf("resolve(%s) = %q, want an error", p, got)
		}
	}
	// A directory is not a library.
	if _, err := hostlib.Resolve(root, "/usr/lib"); err == nil {
		t.Error("resolve of a directory: no error")
	}
}

func TestCDISpec(t *testing.T) {
	d, err := Discover(hostRoot(t), hostGPUs)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := d.CDISpec()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, dev := range spec.Devices {
		names = append(names, dev.Name)
	}
	if !reflect.DeepEqual(names, []string{"GPU-a", "GPU-b", "MIG-b1"}) {
		t.Errorf("devices %v, want the three with device nodes", names)
	}
	if n := len(spec.Devices[2].ContainerEdits.DeviceNodes); n != 3 {
		t.Errorf("MIG device has %d nodes, want 3", n)
	}
	if len(spec.ContainerEdits.DeviceNodes) != 2 || len(spec.ContainerEdits.Mounts) != 3 || spec.Version == "" || spec.Kind != CDIKind {
		t.Errorf("common edits: %+v, version %q, kind %q", spec.ContainerEdits, spec.Version, spec.Kind)
	}
	dir := t.TempDir()
	if err := WriteCDISpec(dir, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, CDISpecFile)); err != nil {
		t.Fatal(err)
	}
	// Simulated GPUs: no spec, and an old one is removed.
	none, err := (&Driver{}).CDISpec()
	if err != nil || none != nil {
		t.Fatalf("simulated: %v, %v", none, err)
	}
	if err := WriteCDISpec(dir, none); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, CDISpecFile)); !os.IsNotExist(err) {
		t.Errorf("spec still there: %v", err)
	}
}
