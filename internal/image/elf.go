package image

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// libDirs are where BinaryFiles looks for shared libraries, in order (the
// loader's default search path on Debian-like systems).
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// BinaryFiles returns the executable at hostPath as the image file
// imagePath (0755) and, when it is dynamically linked, its program
// interpreter and every shared library it needs (transitively, from this
// machine's library directories) at the paths where the loader finds them.
// A static binary (most Go programs built with CGO_ENABLED=0) yields one file.
func BinaryFiles(hostPath, imagePath string) ([]File, error) {
	data, err := os.ReadFile(hostPath)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", hostPath, err)
	}
	files := []File{{Path: imagePath, Mode: 0o755, Data: data}}
	seen := map[string]bool{imagePath: true}
	queue := []string{hostPath}
	for len(queue) > 0 {
		deps, err := elfDeps(queue[0])
		if err != nil {
			return nil, err
		}
		queue = queue[1:]
		for _, dep := range deps {
			if seen[dep] {
				continue
			}
			seen[dep] = true
			b, err := os.ReadFile(dep)
			if err != nil {
				return nil, fmt.Errorf("reading library %s of %s: %w", dep, hostPath, err)
			}
			files = append(files, File{Path: dep, Mode: 0o755, Data: b})
			queue = append(queue, dep)
		}
	}
	return files, nil
}

// elfArchs maps the ELF machines fke builds for to their GOARCH.
var elfArchs = map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}

// ELFArch returns the GOARCH of the executable at p (amd64 or arm64).
func ELFArch(p string) (string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Errorf("reading ELF file %s: %w", p, err)
	}
	defer f.Close()
	arch, ok := elfArchs[f.Machine]
	if !ok {
		return "", fmt.Errorf("%s is built for %s, not amd64 or arm64", p, f.Machine)
	}
	return arch, nil
}

// elfDeps returns the interpreter and resolved DT_NEEDED libraries of the
// ELF file at p; none for a static binary.
func elfDeps(p string) ([]string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return nil, fmt.Errorf("reading ELF file %s: %w", p, err)
	}
	defer f.Close()
	var deps []string
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(prog.Open())
		if err != nil {
			return nil, fmt.Errorf("reading interpreter of %s: %w", p, err)
		}
		deps = append(deps, strings.TrimRight(string(b), "\x00"))
	}
	libs, err := f.ImportedLibraries()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("reading libraries of %s: %w", p, err)
	}
	for _, lib := range libs {
		found := ""
		for _, d := range libDirs {
			if st, err := os.Stat(filepath.Join(d, lib)); err == nil && st.Mode().IsRegular() {
				found = filepath.Join(d, lib)
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("%s needs %s, which is in none of %v", p, lib, libDirs)
		}
		deps = append(deps, found)
	}
	return deps, nil
}
