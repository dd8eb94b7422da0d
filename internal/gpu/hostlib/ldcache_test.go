package hostlib

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// TestReadCacheMatchesLdconfig reads this machine's loader cache and
// compares it with what ldconfig itself prints.
func TestReadCacheMatchesLdconfig(t *testing.T) {
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		if _, err = os.Stat("/sbin/ldconfig"); err != nil {
			t.Skip("no ldconfig here")
		}
		ldconfig = "/sbin/ldconfig"
	}
	if _, err := os.Stat("/etc/ld.so.cache"); err != nil {
		t.Skip("no /etc/ld.so.cache here")
	}
	out, err := exec.Command(ldconfig, "-p").Output()
	if err != nil {
		t.Fatalf("ldconfig -p: %v", err)
	}
	line := regexp.MustCompile(`^\s+(\S+) \(([^)]*)\) => (\S+)$`)
	type lib struct{ name, path string }
	var want []lib
	for _, l := range bytes.Split(out, []byte("\n")) {
		if m := line.FindSubmatch(l); m != nil {
			want = append(want, lib{string(m[1]), string(m[3])})
		}
	}
	got, err := ReadCache("/etc/ld.so.cache")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("read %d entries, ldconfig -p lists %d", len(got), len(want))
	}
	native := 0
	for i := range want {
		if got[i].Name != want[i].name || got[i].Path != want[i].path {
			t.Errorf("entry %d: got %s => %s, ldconfig says %s => %s", i, got[i].Name, got[i].Path, want[i].name, want[i].path)
		}
		if got[i].Native() {
			native++
		}
	}
	if native == 0 {
		t.Error("no entry of this machine's architecture")
	}
}

func TestParseCache(t *testing.T) {
	entries := []CacheEntry{
		{Name: "libcuda.so.1", Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Flags: flagELFLibc6 | flagX8664Lib64},
		{Name: "libcuda.so.1", Path: "/usr/lib/i386-linux-gnu/libcuda.so.1", Flags: flagELFLibc6},
	}
	data := EncodeCache(entries)
	got, err := ParseCache(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != entries[0] || got[1] != entries[1] {
		t.Fatalf("got %+v, want %+v", got, entries)
	}
	if !got[0].Native() || got[1].Native() {
		t.Errorf("Native: x86-64 %v (want true), i386 %v (want false)", got[0].Native(), got[1].Native())
	}
	// An old-format part in front of the new one (glibc before 2.32).
	old := append([]byte(cacheMagicOld+"\x00"), binary.LittleEndian.AppendUint32(nil, 1)...)
	old = append(old, make([]byte, oldEntrySize)...)
	for len(old)%8 != 0 {
		old = append(old, 0)
	}
	if got, err := ParseCache(append(old, data...)); err != nil || len(got) != 2 {
		t.Errorf("with an old-format part: %v, %v", got, err)
	}
	for name, bad := range map[string][]byte{
		"empty":            nil,
		"other magic":      []byte("not a cache at all, but long enough to have a header......"),
		"truncated":        data[:newHeaderSize+10],
		"string past end":  append(append([]byte{}, data[:newHeaderSize+4]...), append([]byte{0xff, 0xff, 0, 0}, data[newHeaderSize+8:]...)...),
		"no terminator":    data[:len(data)-1],
		"too many entries": append(append([]byte(cacheMagicNew), 0xff, 0xff, 0xff, 0x0f), data[24:]...),
	} {
		if _, err := ParseCache(bad); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func FuzzParseCache(f *testing.F) {
	f.Add(EncodeCache([]CacheEntry{{Name: "libnvidia-ml.so.1", Path: "/usr/lib/libnvidia-ml.so.1", Flags: 0x303}}))
	f.Add([]byte(cacheMagicOld))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = ParseCache(data) // must not panic
	})
}
