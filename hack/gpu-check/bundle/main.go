// Command bundle makes the OCI bundles of hack/gpu-check.sh: a container
// that gets what fke's device plugin answers for an allocation (device
// nodes, driver files, environment), run with runc, without Kubernetes.
//
//	bundle --allocation alloc.json --dir DIR -- /usr/bin/nvidia-smi -L
//	bundle --dir DIR -- /check inspect        (a container given no GPU)
//	bundle --add ./cudaprobe ... -- /cudaprobe (a host program copied in)
//	check inspect [PATH...]                   (inside: what it can see, and
//	                                          whether each PATH is there)
//	bundle --deps /usr/bin/nvidia-smi         (the loader and libraries
//	                                          --with copies, one per line)
//
// The root filesystem holds this binary as /check (it is static) and the
// loader and libraries that --with programs (nvidia-smi) need, copied from
// the host.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"fke.dev/fke/internal/image"
)

// allocation is what `fke-gpu-agent allocate` prints.
type allocation struct {
	Devices  []string                             `json:"devices"`
	Response *pluginapi.ContainerAllocateResponse `json:"response"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "inspect" {
		inspect(os.Args[2:])
		return
	}
	allocFile := flag.String("allocation", "", "allocate output (none: a container given no GPU)")
	dir := flag.String("dir", "", "bundle directory to create")
	with := flag.String("with", "", "comma-separated host programs whose libraries the root filesystem needs (e.g. the host's nvidia-smi)")
	add := flag.String("add", "", "comma-separated host programs copied into the root filesystem as /<name>, with their loader and libraries")
	deps := flag.String("deps", "", "print the loader and libraries --with copies for this host program, and exit")
	flag.Parse()
	if *deps != "" {
		files, err := programFiles(*deps, false)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bundle:", err)
			os.Exit(1)
		}
		for _, f := range files {
			fmt.Println(f.Path)
		}
		return
	}
	if *dir == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: bundle [--allocation FILE] [--with PROGRAMS] --dir DIR -- COMMAND...")
		os.Exit(2)
	}
	if err := makeBundle(*dir, *allocFile, *with, *add, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
}

func makeBundle(dir, allocFile, with, add string, args []string) error {
	resp := &pluginapi.ContainerAllocateResponse{}
	if allocFile != "" {
		data, err := os.ReadFile(allocFile)
		if err != nil {
			return err
		}
		var a allocation
		if err := json.Unmarshal(data, &a); err != nil || a.Response == nil {
			return fmt.Errorf("%s: not an allocation (%v)", allocFile, err)
		}
		resp = a.Response
	}
	rootfs := filepath.Join(dir, "rootfs")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	files := []image.File{}
	selfData, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	files = append(files, image.File{Path: "/check", Mode: 0o755, Data: selfData})
	withFiles, err := programFiles(with, false)
	if err != nil {
		return err
	}
	addFiles, err := programFiles(add, true)
	if err != nil {
		return err
	}
	files = append(append(files, withFiles...), addFiles...)
	for _, f := range files {
		p := filepath.Join(rootfs, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(f.Mode)
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(p, f.Data, mode); err != nil {
			return err
		}
	}
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	spec, err := containerSpec(resp, args)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
}

// programFiles returns the files the comma-separated host programs in
// progs need in the root filesystem: their loader and libraries, and with
// whole the programs themselves as /<name> (without it, the allocation
// mounts them).
func programFiles(progs string, whole bool) ([]image.File, error) {
	var files []image.File
	for _, prog := range strings.Split(progs, ",") {
		if prog == "" {
			continue
		}
		deps, err := image.BinaryFiles(prog, "/"+path.Base(prog))
		if err != nil {
			return nil, err
		}
		if !whole {
			deps = deps[1:]
		}
		files = append(files, deps...)
	}
	return files, nil
}

// containerSpec is a minimal unprivileged container that gets resp's
// device nodes (and only those in its device cgroup), read-only mounts
// and environment, plus a loader path covering the mounted libraries.
func containerSpec(resp *pluginapi.ContainerAllocateResponse, args []string) (*specs.Spec, error) {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	keys := make([]string, 0, len(resp.Envs))
	for k := range resp.Envs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+resp.Envs[k])
	}
	var libDirs []string
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev"}},
	}
	for _, m := range resp.Mounts {
		opts := []string{"bind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{Destination: m.ContainerPath, Type: "bind", Source: m.HostPath, Options: opts})
		if d := path.Dir(m.ContainerPath); strings.Contains(path.Base(m.ContainerPath), ".so") && !slices.Contains(libDirs, d) {
			libDirs = append(libDirs, d)
		}
	}
	if len(libDirs) > 0 {
		env = append(env, "LD_LIBRARY_PATH="+strings.Join(libDirs, ":"))
	}
	deny := specs.LinuxDeviceCgroup{Allow: false, Access: "rwm"}
	linux := &specs.Linux{
		Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
			{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace}},
		Resources:   &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{deny}},
		MaskedPaths: []string{"/proc/kcore", "/proc/keys", "/proc/timer_list"},
	}
	for _, d := range resp.Devices {
		var st unix.Stat_t
		if err := unix.Stat(d.HostPath, &st); err != nil {
			return nil, fmt.Errorf("device %s: %w", d.HostPath, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return nil, fmt.Errorf("device %s is not a character device", d.HostPath)
		}
		major, minor := int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		mode := os.FileMode(0o666)
		linux.Devices = append(linux.Devices, specs.LinuxDevice{Path: d.ContainerPath, Type: "c", Major: major, Minor: minor, FileMode: &mode})
		linux.Resources.Devices = append(linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Minor: &minor, Access: "rw"})
	}
	caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID"}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args: args, Env: env, Cwd: "/", NoNewPrivileges: true,
			Capabilities: &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps},
		},
		Root:     &specs.Root{Path: "rootfs"},
		Hostname: "fke-gpu-check",
		Mounts:   mounts,
		Linux:    linux,
	}, nil
}

// inspect prints, from inside a container, the NVIDIA device nodes and
// driver libraries it can see, the visible-devices variables, and for each
// of paths what is there (a file and its mode, a link and its target, or
// missing).
func inspect(paths []string) {
	out := map[string]any{}
	devs, _ := filepath.Glob("/dev/nvidia*")
	caps, _ := filepath.Glob("/dev/nvidia-caps/*")
	out["devices"] = append(devs, caps...)
	var libs []string
	for _, dir := range []string{"/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"} {
		found, _ := filepath.Glob(filepath.Join(dir, "libnvidia-ml.so*"))
		libs = append(libs, found...)
	}
	out["nvml"] = libs
	out["NVIDIA_VISIBLE_DEVICES"] = os.Getenv("NVIDIA_VISIBLE_DEVICES")
	out["CUDA_VISIBLE_DEVICES"] = os.Getenv("CUDA_VISIBLE_DEVICES")
	if len(paths) > 0 {
		seen := map[string]string{}
		for _, p := range paths {
			seen[p] = describe(p)
		}
		out["paths"] = seen
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

// describe says what is at p, without following a final link.
func describe(p string) string {
	st, err := os.Lstat(p)
	if err != nil {
		return "missing (" + err.Error() + ")"
	}
	if st.Mode()&os.ModeSymlink != 0 {
		target, _ := os.Readlink(p)
		if _, err := os.Stat(p); err != nil {
			return "link to " + target + " (dangling)"
		}
		return "link to " + target
	}
	return fmt.Sprintf("%v %d bytes", st.Mode(), st.Size())
}
