package hostlib

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Resolve follows the symlinks of host path p inside root (absolute link
// targets are host paths) and returns the host path of the regular file it
// names.
func Resolve(root, p string) (string, error) {
	for hops := 0; hops < 40; hops++ {
		dir, err := resolveDir(root, path.Dir(p))
		if err != nil {
			return "", err
		}
		p = path.Join(dir, path.Base(p))
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if !fi.Mode().IsRegular() {
				return "", fmt.Errorf("%s is not a regular file", p)
			}
			return p, nil
		}
		target, err := os.Readlink(filepath.Join(root, p))
		if err != nil {
			return "", err
		}
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(p), target)
		}
		p = path.Clean(target)
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", p)
}

// resolveDir resolves the symlinks among dir's components inside root
// (e.g. /lib -> usr/lib on merged-/usr hosts).
func resolveDir(root, dir string) (string, error) {
	out := "/"
	parts := strings.Split(strings.Trim(path.Clean(dir), "/"), "/")
	hops := 0
	for i := 0; i < len(parts); i++ {
		if parts[i] == "" {
			continue
		}
		next := path.Join(out, parts[i])
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			out = next
			continue
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			out = "/"
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s: too many levels of symbolic links", dir)
		}
		parts = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), parts[i+1:]...)
		i = -1
	}
	return out, nil
}

// LibraryPath returns where, seen from this process, the native library
// soname of the host at root is (e.g. libnvidia-ml.so.1 for an agent in a
// container that must load the host's NVML from /host).
func LibraryPath(root, soname string) (string, error) {
	entries, err := ReadCache(filepath.Join(root, "etc", "ld.so.cache"))
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Name != soname || !e.Native() {
			continue
		}
		if real, err := Resolve(root, e.Path); err == nil {
			return filepath.Join(root, real), nil
		}
	}
	return "", fmt.Errorf("%s is not in the loader cache of %s", soname, root)
}
