// Package hostlib finds a host's native libraries as its dynamic loader
// would: through the loader cache (/etc/ld.so.cache) and the symbolic
// links of the host's tree, which may be mounted at another root. It does
// not load them, so a binary that only asks where NVML is (the local node
// provider) does not link the NVML bindings.
package hostlib

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
)

// CacheEntry is one library of the dynamic loader's cache (/etc/ld.so.cache),
// as `ldconfig -p` prints it: "libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1".
type CacheEntry struct {
	// Name is the library's soname, e.g. libcuda.so.1.
	Name string
	// Path is where the loader finds it (often a symlink).
	Path string
	// Flags are the cache's type and architecture bits.
	Flags int32
}

// The layout of glibc's cache file, format "glibc-ld.so.cache1.1" (written
// by every glibc since 2.32, and after the old format by older ones): a
// 48-byte header, nlibs 24-byte entries, then the string table. Entry key
// and value are byte offsets of NUL-terminated strings from the start of
// the header.
const (
	cacheMagicNew  = "glibc-ld.so.cache1.1"
	cacheMagicOld  = "ld.so-1.7.0"
	newHeaderSize  = 48
	newEntrySize   = 24
	oldHeaderSize  = 16 // magic (11, padded to 12) + nlibs
	oldEntrySize   = 12
	flagELFLibc6   = 0x0003
	flagTypeMask   = 0x00ff
	flagArchMask   = 0xff00
	flagX8664Lib64 = 0x0300
	flagAArch64    = 0x0a00
)

// nativeArch is the architecture bits of this process's libraries.
func nativeArch() int32 {
	switch runtime.GOARCH {
	case "amd64":
		return flagX8664Lib64
	case "arm64":
		return flagAArch64
	}
	return -1
}

// Native reports whether e is a libc6 library of this process's
// architecture (not, say, an i386 copy of the same library).
func (e CacheEntry) Native() bool {
	return e.Flags&flagTypeMask == flagELFLibc6 && e.Flags&flagArchMask == nativeArch()
}

// ReadCache reads the loader cache at path.
func ReadCache(path string) ([]CacheEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading loader cache: %w", err)
	}
	entries, err := ParseCache(data)
	if err != nil {
		return nil, fmt.Errorf("loader cache %s: %w", path, err)
	}
	return entries, nil
}

// ParseCache decodes a loader cache in the new format, skipping an old-format
// part in front of it.
func ParseCache(data []byte) ([]CacheEntry, error) {
	start := 0
	if bytes.HasPrefix(data, []byte(cacheMagicOld)) {
		if len(data) < oldHeaderSize {
			return nil, errors.New("truncated old-format header")
		}
		n := int(binary.LittleEndian.Uint32(data[12:16]))
		start = oldHeaderSize + n*oldEntrySize
		start = (start + 7) &^ 7 // the new part is aligned like its struct
		if start > len(data) {
			return nil, errors.New("truncated old-format entries")
		}
	}
	hdr := data[start:]
	if !bytes.HasPrefix(hdr, []byte(cacheMagicNew)) {
		return nil, fmt.Errorf("not a %s cache", cacheMagicNew)
	}
	if len(hdr) < newHeaderSize {
		return nil, errors.New("truncated header")
	}
	n := int(binary.LittleEndian.Uint32(hdr[20:24]))
	if n < 0 || newHeaderSize+n*newEntrySize > len(hdr) {
		return nil, fmt.Errorf("cache claims %d entries, more than its %d bytes hold", n, len(hdr))
	}
	str := func(off uint32) (string, error) {
		if int(off) >= len(hdr) {
			return "", fmt.Errorf("string offset %d out of range", off)
		}
		s := hdr[off:]
		end := bytes.IndexByte(s, 0)
		if end < 0 {
			return "", fmt.Errorf("string at %d not terminated", off)
		}
		return string(s[:end]), nil
	}
	out := make([]CacheEntry, 0, n)
	for i := 0; i < n; i++ {
		e := hdr[newHeaderSize+i*newEntrySize:]
		flags := int32(binary.LittleEndian.Uint32(e[0:4]))
		name, err := str(binary.LittleEndian.Uint32(e[4:8]))
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		path, err := str(binary.LittleEndian.Uint32(e[8:12]))
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		out = append(out, CacheEntry{Name: name, Path: path, Flags: flags})
	}
	return out, nil
}

// NativeFlags are the flags of a cache entry for a library of this
// process's architecture (for EncodeCache's callers).
func NativeFlags() int32 { return flagELFLibc6 | nativeArch() }

// EncodeCache writes entries in the loader cache's new format (what
// ldconfig writes): the cache of a simulated host, in tests.
func EncodeCache(entries []CacheEntry) []byte {
	var strs bytes.Buffer
	base := newHeaderSize + len(entries)*newEntrySize
	offsets := make([][2]uint32, len(entries))
	for i, e := range entries {
		offsets[i][0] = uint32(base + strs.Len())
		strs.WriteString(e.Name + "\x00")
		offsets[i][1] = uint32(base + strs.Len())
		strs.WriteString(e.Path + "\x00")
	}
	var b bytes.Buffer
	b.WriteString(cacheMagicNew)
	le := binary.LittleEndian
	b.Write(le.AppendUint32(nil, uint32(len(entries))))
	b.Write(le.AppendUint32(nil, uint32(strs.Len())))
	b.Write(make([]byte, 4+4+12)) // flags, padding, extension offset, unused
	for i, e := range entries {
		b.Write(le.AppendUint32(nil, uint32(e.Flags)))
		b.Write(le.AppendUint32(nil, offsets[i][0]))
		b.Write(le.AppendUint32(nil, offsets[i][1]))
		b.Write(make([]byte, 4+8)) // osversion, hwcap
	}
	b.Write(strs.Bytes())
	return b.Bytes()
}
