package testenv

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/controlplane/local"
	"fke.dev/fke/internal/managementplane"
)

// Proc is a process found in /proc.
type Proc struct {
	PID  int
	Args []string
}

// FindProcs returns the live (non-zombie) processes whose command line contains every needle.
func FindProcs(needles ...string) []Proc {
	entries, _ := os.ReadDir("/proc")
	var out []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !Alive(pid) {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(data) == 0 {
			continue
		}
		line := strings.ReplaceAll(string(data), "\x00", " ")
		match := true
		for _, n := range needles {
			if !strings.Contains(line, n) {
				match = false
				break
			}
		}
		if match {
			out = append(out, Proc{PID: pid, Args: strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")})
		}
	}
	return out
}

// Alive reports whether pid runs (a zombie does not).
func Alive(pid int) bool { return managementplane.Alive(pid) }

// ListeningAddrs returns the TCP addresses ("127.0.0.1:8443", "[::]:80")
// on which process pid listens, sorted.
func ListeningAddrs(pid int) ([]string, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return nil, err
	}
	sockets := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			sockets[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(filepath.Join(dir, "net", table))
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			if len(f) < 10 || f[3] != "0A" || !sockets[f[9]] {
				continue
			}
			addr, err := procNetAddr(f[1])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", table, err)
			}
			out = append(out, addr)
		}
	}
	slices.Sort(out)
	return out, nil
}

// procNetAddr decodes an address of /proc/net/tcp{,6}: the IP in hex as
// the kernel stores it (32-bit words in host order, little-endian here),
// a colon, the port in hex.
func procNetAddr(s string) (string, error) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return "", fmt.Errorf("address %q", s)
	}
	raw, err := hex.DecodeString(ipHex)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return "", fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return "", fmt.Errorf("address %q: %w", s, err)
	}
	ip, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)).String(), nil
}

// PlaneProcs is how many processes the control plane whose data lies in
// dir runs, by the layout recorded there: one fke-kube-plane process
// (combined) or one per component (separate).
func PlaneProcs(t testing.TB, dir string) int {
	t.Helper()
	l, err := local.RecordedLayout(dir)
	if err != nil {
		t.Fatalf("plane in %s: %v", dir, err)
	}
	switch l {
	case local.LayoutCombined:
		return 1
	case local.LayoutSeparate:
		return len(controlplane.Components)
	default:
		t.Fatalf("plane in %s: unknown layout %q", dir, l)
		return 0
	}
}
