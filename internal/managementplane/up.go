package managementplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// UpOptions configure Up.
type UpOptions struct {
	DataDir string
	// Self is the fke executable; Up runs `Self daemon --data-dir DIR` in the background.
	Self string
	// Env is added to the daemon's environment (e.g. FKE_BIN_DIR).
	Env []string
	// Timeout bounds the wait for readiness.
	Timeout time.Duration
	// Progress receives one line per phase change.
	Progress io.Writer
	// WarmPool is the number of standby control planes fke-manager keeps
	// (see DaemonOptions.WarmPool).
	WarmPool int
	// OneProcessPlanes: see DaemonOptions.OneProcessPlanes.
	OneProcessPlanes bool
}

// Up starts the management plane in the background and waits until it is
// ready. When one already runs, it returns its state and started=false.
func Up(ctx context.Context, opts UpOptions) (st State, started bool, err error) {
	p := Paths{Dir: opts.DataDir}
	if st, err := ReadState(opts.DataDir); err == nil {
		return st, false, nil
	}
	if err := os.MkdirAll(p.Logs(), 0o700); err != nil {
		return State{}, false, fmt.Errorf("creating %s: %w", p.Logs(), err)
	}
	logf, err := os.OpenFile(p.DaemonLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return State{}, false, err
	}
	defer logf.Close()
	_ = os.Remove(p.State())
	args := append([]string{"daemon", "--data-dir", opts.DataDir, "--warm-pool", strconv.Itoa(opts.WarmPool)}, oneProcessArgs(opts.OneProcessPlanes)...)
	cmd := exec.Command(opts.Self, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), opts.Env...)
	// A session of its own: the daemon outlives the terminal that ran `fke up`.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return State{}, false, fmt.Errorf("starting the fke daemon: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastMsg := ""
	for {
		select {
		case <-ctx.Done():
			return State{}, false, ctx.Err()
		case <-deadline.C:
			return State{}, false, fmt.Errorf("the management plane was not ready after %s; see %s", timeout, p.DaemonLog())
		case err := <-exited:
			return State{}, false, fmt.Errorf("the fke daemon exited (%v): %s", err, lastLines(p.DaemonLog(), 5))
		case <-tick.C:
		}
		cur, err := ReadState(opts.DataDir)
		if err != nil && !errors.Is(err, ErrNotRunning) {
			continue
		}
		if cur.Phase == "" {
			continue
		}
		if msg := cur.Phase + ": " + cur.Message; msg != lastMsg && cur.Message != "" && opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "  %s\n", cur.Message)
			lastMsg = msg
		}
		switch cur.Phase {
		case PhaseReady:
			return cur, true, nil
		case PhaseFailed:
			return cur, false, fmt.Errorf("the management plane failed to start: %s", cur.Message)
		}
	}
}

// Down stops the daemon of dir and waits until it and its processes are gone.
// It returns ErrNotRunning (wrapped) when none runs. With purge, it then
// removes the data directory (also when nothing ran).
func Down(ctx context.Context, dir string, purge bool) error {
	st, err := ReadState(dir)
	if err == nil {
		if err := stopDaemon(ctx, st); err != nil {
			return err
		}
	}
	if purge {
		if rerr := os.RemoveAll(dir); rerr != nil {
			return fmt.Errorf("removing %s: %w", dir, rerr)
		}
		return nil
	}
	return err
}

func stopDaemon(ctx context.Context, st State) error {
	if err := syscall.Kill(st.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling the fke daemon (pid %d): %w", st.PID, err)
	}
	// The daemon stops its children (and they theirs) before it exits.
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for Alive(st.PID) {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(st.PID, syscall.SIGKILL)
			return fmt.Errorf("the fke daemon (pid %d) did not stop in time; killed it", st.PID)
		case <-tick.C:
		}
	}
	return nil
}

func lastLines(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "see " + path
	}
	lines := strings.Split(string(bytes.TrimSpace(data)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
