package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"fke.dev/fke/internal/localplane"
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
func Alive(pid int) bool { return localplane.Alive(pid) }
