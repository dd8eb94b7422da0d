package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"fke.dev/fke/internal/hostnet"
)

// MountNSDir keeps the nodes' mount namespaces as files (bind mounts of
// /proc/<pid>/ns/mnt, as ip netns keeps network namespaces), so that a
// restarted manager enters the same namespace again. It is a private
// mount of itself: a mount namespace file may not sit on a shared mount.
const MountNSDir = "/run/fke/mnt"

// CgroupParent is the cgroup under which every node has its own cgroup root.
const CgroupParent = "/fke"

// cgroupFS is where the cgroup hierarchies are mounted.
const cgroupFS = "/sys/fs/cgroup"

// run runs a command and returns its combined output; a failure's error
// carries the output.
type run = hostnet.Runner

// mountInfo is one line of /proc/self/mountinfo: mount point and type.
type mountInfo struct{ point, fstype string }

func readMounts() ([]mountInfo, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	var out []mountInfo
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || sep+1 >= len(f) {
			continue
		}
		out = append(out, mountInfo{point: unescapeMount(f[4]), fstype: f[sep+1]})
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountsUnder lists this namespace's mount points at or below dir, deepest first.
func MountsUnder(dir string) ([]string, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, m := range mounts {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			out = append(out, m.point)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

func isMountPoint(path string, fstype string) bool {
	mounts, err := readMounts()
	if err != nil {
		return false
	}
	for _, m := range mounts {
		if m.point == path && (fstype == "" || m.fstype == fstype) {
			return true
		}
	}
	return false
}

// ensureMountNSDir makes MountNSDir a private mount of itself.
func ensureMountNSDir(ctx context.Context, r run) error {
	if err := os.MkdirAll(MountNSDir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", MountNSDir, err)
	}
	if !isMountPoint(MountNSDir, "") {
		if _, err := r(ctx, "mount", "--bind", MountNSDir, MountNSDir); err != nil {
			return fmt.Errorf("making %s a mount: %w", MountNSDir, err)
		}
	}
	if _, err := r(ctx, "mount", "--make-private", MountNSDir); err != nil {
		return fmt.Errorf("making %s private: %w", MountNSDir, err)
	}
	return nil
}

// mountNSFile returns the file of the mount namespace of the node whose
// network namespace is netns.
func mountNSFile(netns string) string { return filepath.Join(MountNSDir, netns) }

// ensureMountNS makes the node's mount namespace, kept in file, with the
// node's bind mounts (target paths are created on the host, empty). In it,
// the host's node namespace files (network and mount) are detached: a copy
// would keep other nodes' namespaces alive after they are deleted.
// Idempotent: an existing namespace is kept as it is.
func ensureMountNS(ctx context.Context, r run, file string, binds [][2]string) error {
	if isMountPoint(file, "nsfs") {
		return nil
	}
	if err := ensureMountNSDir(ctx, r); err != nil {
		return err
	}
	for _, b := range binds {
		for _, d := range b {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("creating mount point %s: %w", d, err)
			}
		}
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return fmt.Errorf("creating %s: %w", file, err)
	}
	if _, err := r(ctx, "unshare", "--mount="+file, "--propagation", "private", "--", "true"); err != nil {
		return fmt.Errorf("creating mount namespace %s: %w", file, err)
	}
	var script strings.Builder
	script.WriteString(`for m in $(awk '$5 ~ "^(/run/netns|` + MountNSDir + `)(/|$)" {print $5}' /proc/self/mountinfo | sort -r); do umount -l "$m" 2>/dev/null || true; done` + "\n")
	script.WriteString("set -e\n")
	for _, b := range binds {
		fmt.Fprintf(&script, "mount --bind %q %q\n", b[0], b[1])
	}
	if _, err := r(ctx, "nsenter", "--mount="+file, "--", "sh", "-c", script.String()); err != nil {
		_ = removeMountNS(ctx, r, file)
		return fmt.Errorf("mounting the node directories in %s: %w", file, err)
	}
	return nil
}

// removeMountNS unmounts the namespace file and removes it; the namespace
// ends with its last process. Idempotent.
func removeMountNS(ctx context.Context, r run, file string) error {
	if isMountPoint(file, "") {
		if _, err := r(ctx, "umount", file); err != nil {
			if _, err := r(ctx, "umount", "-l", file); err != nil {
				return fmt.Errorf("unmounting %s: %w", file, err)
			}
		}
	}
	if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", file, err)
	}
	return nil
}

// cgroupHierarchies returns the mounted cgroup hierarchies (v1 controllers
// or the v2 root).
func cgroupHierarchies() ([]string, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if (m.fstype == "cgroup" || m.fstype == "cgroup2") && strings.HasPrefix(m.point, cgroupFS) {
			out = append(out, m.point)
		}
	}
	return out, nil
}

// ensureCgroup creates cgroup (e.g. /fke/<node>) in every hierarchy; in
// cpuset, each new level gets its parent's CPUs and memory nodes.
func ensureCgroup(cgroup string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		parts := strings.Split(strings.Trim(cgroup, "/"), "/")
		dir := h
		for _, p := range parts {
			parent := dir
			dir = filepath.Join(dir, p)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if cur, err := os.ReadFile(filepath.Join(dir, f)); err == nil && len(bytes.TrimSpace(cur)) == 0 {
					val, err := os.ReadFile(filepath.Join(parent, f))
					if err != nil {
						return fmt.Errorf("reading %s: %w", filepath.Join(parent, f), err)
					}
					if err := os.WriteFile(filepath.Join(dir, f), val, 0o644); err != nil {
						return fmt.Errorf("writing %s: %w", filepath.Join(dir, f), err)
					}
				}
			}
		}
	}
	return nil
}

// EnsureCgroup creates cgroup in every hierarchy, as for a node's cgroup
// root (benchmarks start a kubelet by hand under CgroupParent with it).
func EnsureCgroup(cgroup string) error { return ensureCgroup(cgroup) }

// RemoveCgroup removes cgroup and the cgroups below it in every hierarchy;
// they must hold no process.
func RemoveCgroup(cgroup string) error { return removeCgroup(cgroup) }

// cgroupDirs lists cgroup's directories in every hierarchy, deepest first.
func cgroupDirs(cgroup string) ([]string, error) {
	hs, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range hs {
		root := filepath.Join(h, cgroup)
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return filepath.SkipDir
				}
				return err
			}
			if d.IsDir() {
				out = append(out, p)
			}
			return nil
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("listing cgroup %s: %w", root, err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// cgroupPids returns the processes in cgroup or below, in any hierarchy.
func cgroupPids(cgroup string) ([]int, error) {
	dirs, err := cgroupDirs(cgroup)
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var out []int
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out, nil
}

// removeCgroup removes cgroup and everything below it in every hierarchy,
// deepest first. Processes must be gone.
func removeCgroup(cgroup string) error {
	dirs, err := cgroupDirs(cgroup)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// nsPids returns the processes whose namespace of kind ("mnt", "net") is
// the one kept in file.
func nsPids(file, kind string) ([]int, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(file, &st); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading namespace %s: %w", file, err)
	}
	want := fmt.Sprintf("%s:[%d]", kind, st.Ino)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", kind)); err == nil && link == want {
			out = append(out, pid)
		}
	}
	return out, nil
}

// killAll sends SIGKILL to what find returns until it returns nothing, or
// fails when ctx ends first.
func killAll(ctx context.Context, what string, find func() ([]int, error)) error {
	for {
		pids, err := find()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL) // gone already: the next find tells
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("killing the processes of %s: %d left (%v): %w", what, len(pids), pids, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
