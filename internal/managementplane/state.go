package managementplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Phases of the daemon, in order.
const (
	PhaseStarting   = "Starting"
	PhaseInstalling = "InstallingAPI"
	PhaseManager    = "StartingManager"
	PhaseReady      = "Ready"
	PhaseStopping   = "Stopping"
	PhaseFailed     = "Failed"
)

// Component is one process the daemon supervises.
type Component struct {
	Name     string `json:"name"`
	PID      int    `json:"pid"`
	Ready    bool   `json:"ready"`
	Restarts int    `json:"restarts"`
}

// State is what the daemon publishes in its state file.
type State struct {
	PID        int         `json:"pid"`
	Phase      string      `json:"phase"`
	Message    string      `json:"message,omitempty"`
	Endpoint   string      `json:"endpoint,omitempty"`
	Kubeconfig string      `json:"kubeconfig,omitempty"`
	StartedAt  time.Time   `json:"startedAt"`
	Components []Component `json:"components,omitempty"`
	// Registry is the OCI registry's address (127.0.0.1:<port>); empty when
	// it does not run, and RegistryError says why.
	Registry      string `json:"registry,omitempty"`
	RegistryError string `json:"registryError,omitempty"`
}

// ErrNotRunning says no daemon runs for a data directory.
var ErrNotRunning = errors.New("the fke management plane is not running")

// ReadState returns the state of the daemon of dir, or ErrNotRunning (wrapped,
// with a hint) when none runs.
func ReadState(dir string) (State, error) {
	p := Paths{Dir: dir}
	data, err := os.ReadFile(p.State())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return State{}, fmt.Errorf("%w in %s: start it with `fke up`", ErrNotRunning, dir)
		}
		return State{}, fmt.Errorf("reading %s: %w", p.State(), err)
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, fmt.Errorf("decoding %s: %w", p.State(), err)
	}
	if !Alive(st.PID) || !lockHeld(p.Lock()) {
		return st, fmt.Errorf("%w in %s (its last daemon, pid %d, is gone): start it with `fke up`", ErrNotRunning, dir, st.PID)
	}
	return st, nil
}

func writeState(p Paths, st State) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := p.State() + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p.State())
}

// Alive reports whether a process with pid runs (a zombie does not).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A zombie (exited, not yet reaped) is not alive.
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	if i := strings.LastIndexByte(string(data), ')'); i >= 0 && i+2 < len(data) {
		return data[i+2] != 'Z'
	}
	return true
}

// RSS returns the resident memory of process pid in bytes (VmRSS of
// /proc/PID/status); ok is false when it cannot be read (no such process).
func RSS(pid int) (bytes int64, ok bool) {
	if pid <= 0 {
		return 0, false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	return parseVmRSS(string(data))
}

// parseVmRSS reads the "VmRSS:   1234 kB" line of a /proc/PID/status.
func parseVmRSS(status string) (int64, bool) {
	for line := range strings.Lines(status) {
		rest, found := strings.CutPrefix(line, "VmRSS:")
		if !found {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// lockHeld reports whether some process holds the daemon lock.
func lockHeld(path string) bool {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// acquireLock takes the daemon lock or fails when another daemon holds it.
// The lock lives as long as the returned file stays open.
func acquireLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	// lockHeld probes by taking the lock for an instant (fke up polls it
	// while its daemon starts): a daemon that meets such a probe tries
	// again for a while before it concludes that another daemon runs.
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another fke daemon runs for this data directory: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lockWait is how long acquireLock waits out probes of the lock.
const lockWait = 2 * time.Second
