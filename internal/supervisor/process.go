package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Defaults for the zero fields of a Spec.
const (
	DefaultMinBackoff  = 200 * time.Millisecond
	DefaultMaxBackoff  = 10 * time.Second
	DefaultGracePeriod = 10 * time.Second
)

const (
	// backoffResetAfter: a process that ran longer than this before exiting
	// is restarted after MinBackoff again.
	backoffResetAfter = 30 * time.Second
	// Spec.Ready is called every readyPollInterval for the first
	// readyFastPollFor of a start (most processes are ready within it),
	// then every readySlowPollInterval: a process that takes long to be
	// ready, or never reports so, costs one call a second, not ten.
	readyPollInterval     = 100 * time.Millisecond
	readyFastPollFor      = 10 * time.Second
	readySlowPollInterval = time.Second
	// readyProbeTimeout bounds one call of Spec.Ready.
	readyProbeTimeout = 5 * time.Second
	// beforeRestartTimeout bounds one call of Spec.BeforeRestart.
	beforeRestartTimeout = 30 * time.Second
)

// Spec describes one supervised child process.
type Spec struct {
	// Name is unique in a Group and used in logs.
	Name string
	// Path is the binary: a path, or a name looked up in $PATH.
	Path string
	Args []string
	// Env is the child's environment; nil inherits this process's.
	Env []string
	// Dir is the child's working directory; empty means this process's.
	Dir string
	// LogPath is where the child's stdout and stderr are appended (its
	// directory is created). Empty discards them.
	LogPath string
	// Ready reports whether the child serves. It is called every 100ms
	// (each call bounded by 5s) after every start until it returns nil. Nil
	// means ready as soon as the child started.
	Ready func(ctx context.Context) error
	// MinBackoff (default 200ms) is the first delay before restarting a
	// child that exited unexpectedly; the delay doubles up to MaxBackoff
	// (default 10s) and drops back to MinBackoff after a run longer than
	// 30s.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// GracePeriod (default 10s) is how long Stop waits after SIGTERM before
	// SIGKILL.
	GracePeriod time.Duration
	// MaxRestarts, when positive, is how many restarts are attempted before
	// the process is left Failed. Zero means restart forever.
	MaxRestarts int
	// Nice is the child's scheduling niceness (-20..19; 0 is normal): a
	// positive value lets it use only the CPU other processes leave. It is
	// applied only when this process may lower a niceness again (runs as
	// root), and SetNice changes it while the child runs.
	Nice int
	// Slot names what the child holds that no other child may hold at the
	// same time (a port, a data directory); empty means its Name. It
	// matters only to a Group whose children a Holder keeps: a child left
	// by a previous supervisor in the same slot is taken over when its
	// command is the same, else stopped before this one starts.
	Slot string
	// Root, when set, is the directory the child's files lie in: its
	// arguments, Dir and LogPath name paths below it. The directory may
	// later be reached by another path (moved, with a link left at its old
	// place), and the child, started with the old paths, runs on. It
	// matters only to a Group whose children a Holder keeps: a child left
	// by a previous supervisor has the same command as this one when the
	// two differ only in the path of their Roots and both Roots are the
	// same directory (see Holder).
	Root string
	// BeforeRestart, when set, runs before every restart after an
	// unexpected exit (not before the first start), when the backoff is
	// over, with no lock held. Its ctx ends when Stop begins or after 30s.
	// An error is logged and the restart goes ahead.
	BeforeRestart func(ctx context.Context) error
}

func (s Spec) withDefaults() Spec {
	if s.MinBackoff <= 0 {
		s.MinBackoff = DefaultMinBackoff
	}
	if s.MaxBackoff <= 0 {
		s.MaxBackoff = DefaultMaxBackoff
	}
	if s.MaxBackoff < s.MinBackoff {
		s.MaxBackoff = s.MinBackoff
	}
	if s.GracePeriod <= 0 {
		s.GracePeriod = DefaultGracePeriod
	}
	return s
}

// State is where a supervised process is in its life.
type State int

const (
	// Starting: the child runs and Spec.Ready has not yet returned nil.
	Starting State = iota
	// Ready: the child runs and Spec.Ready returned nil since it started.
	Ready
	// Backoff: the child exited unexpectedly and waits to be restarted.
	Backoff
	// Stopped: Stop ended the process; it is not restarted.
	Stopped
	// Failed: the child exited and Spec.MaxRestarts restarts were spent.
	Failed
)

func (s State) String() string {
	switch s {
	case Starting:
		return "Starting"
	case Ready:
		return "Ready"
	case Backoff:
		return "Backoff"
	case Stopped:
		return "Stopped"
	case Failed:
		return "Failed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Process is one supervised child. Its methods are safe for concurrent use.
type Process struct {
	spec   Spec
	path   string // resolved binary
	log    *slog.Logger
	holder *HolderClient // nil: children are started here

	stopCh chan struct{} // closed when Stop begins
	done   chan struct{} // closed when the process is Stopped or Failed

	mu       sync.Mutex
	state    State
	changed  chan struct{} // closed and replaced on every state change
	pid      int
	restarts int // successful restarts
	attempts int // restart attempts, for MaxRestarts
	stopping bool
	gen      int // bumped on every start, so that stale probes are ignored
	// adopted: the running child was taken over from an earlier
	// supervisor (see Holder), not started by this one.
	adopted bool
	// root is the Spec.Root the running child was started with: the
	// earlier supervisor's for an adopted child.
	root     string
	err      error
	probeErr error // Spec.Ready's last error while Starting
}

// Name returns the process's Spec.Name.
func (p *Process) Name() string { return p.spec.Name }

// Pid returns the child's pid, or 0 when no child runs.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// State returns the current state.
func (p *Process) State() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Restarts returns how many times the child was started again after an
// unexpected exit.
func (p *Process) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// Root returns the Spec.Root the running child was started with: its
// own, or for a child taken over from an earlier supervisor (see Holder)
// the one that supervisor gave it (the same directory, perhaps by another
// path). While no child runs, the one the next start gives: Spec.Root.
func (p *Process) Root() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 {
		return p.spec.Root
	}
	return p.root
}

// Adopted reports whether the running child was taken over from an
// earlier supervisor (see Holder) rather than started by this one. A
// restart ends it: the child started then is this supervisor's own.
func (p *Process) Adopted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid != 0 && p.adopted
}

// Adopting reports whether the running child was taken over from an
// earlier supervisor and its readiness not checked yet: it served under
// that supervisor and ran on, and Spec.Ready has neither passed (the
// process is then Ready) nor failed since.
func (p *Process) Adopting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid != 0 && p.adopted && p.state == Starting && p.probeErr == nil
}

// SetNice changes the child's niceness (see Spec.Nice) now, on every
// thread, and for its later restarts. It does nothing where Spec.Nice does
// not apply (not root).
func (p *Process) SetNice(nice int) error {
	if !canRenice {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spec.Nice = nice
	if p.pid == 0 {
		return nil
	}
	if err := renice(p.pid, nice); err != nil {
		return fmt.Errorf("setting the niceness of %s (pid %d) to %d: %w", p.spec.Name, p.pid, nice, err)
	}
	return nil
}

// WaitReady blocks until the process is Ready. It returns an error when the
// process is Stopped or Failed, or when ctx ends first.
func (p *Process) WaitReady(ctx context.Context) error {
	for {
		p.mu.Lock()
		state, changed, err := p.state, p.changed, p.err
		p.mu.Unlock()
		switch state {
		case Ready:
			return nil
		case Stopped:
			return fmt.Errorf("waiting for %s to be ready: process stopped", p.spec.Name)
		case Failed:
			return fmt.Errorf("waiting for %s to be ready: process failed: %w", p.spec.Name, err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			p.mu.Lock()
			probeErr := p.probeErr
			p.mu.Unlock()
			if probeErr != nil {
				return fmt.Errorf("waiting for %s to be ready (state %s): %w (last check: %w)", p.spec.Name, state, ctx.Err(), probeErr)
			}
			return fmt.Errorf("waiting for %s to be ready (state %s): %w", p.spec.Name, state, ctx.Err())
		}
	}
}

func newProcess(spec Spec, path string, log *slog.Logger) *Process {
	return &Process{
		spec:    spec,
		path:    path,
		log:     log.With("name", spec.Name),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
}

// resolveBinary finds the binary of spec as exec.Cmd would run it.
func resolveBinary(spec Spec) (string, error) {
	path := spec.Path
	if spec.Dir != "" && !filepath.IsAbs(path) && filepath.Base(path) != path {
		path = filepath.Join(spec.Dir, path)
	}
	resolved, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("binary %s not found: %w", spec.Path, err)
	}
	if abs, err := filepath.Abs(resolved); err == nil {
		resolved = abs
	}
	return resolved, nil
}

func (p *Process) setStateLocked(s State) {
	p.state = s
	close(p.changed)
	p.changed = make(chan struct{})
}

// launch is what starting the child of a Spec takes: the same for a child
// started here and one started by a Holder.
type launch struct {
	Name string `json:"name"`
	// Slot: see Spec.Slot; the name when empty.
	Slot    string   `json:"slot"`
	Path    string   `json:"path"` // resolved binary
	Args    []string `json:"args"` // argv, from argv[0]
	Env     []string `json:"env"`
	Dir     string   `json:"dir,omitempty"`
	LogPath string   `json:"logPath,omitempty"`
	Nice    int      `json:"nice,omitempty"`
	// Root: see Spec.Root.
	Root string `json:"root,omitempty"`
	// GraceSeconds is the SIGTERM → SIGKILL delay when a Holder replaces
	// the child.
	GraceSeconds float64 `json:"graceSeconds,omitempty"`
}

func (p *Process) launch() launch {
	l := launch{
		Name: p.spec.Name, Slot: p.spec.Slot, Path: p.path,
		Args: append([]string{p.spec.Path}, p.spec.Args...),
		Env:  p.spec.Env, Dir: p.spec.Dir, LogPath: p.spec.LogPath, Nice: p.spec.Nice, Root: p.spec.Root,
		GraceSeconds: p.spec.GracePeriod.Seconds(),
	}
	if l.Slot == "" {
		l.Slot = l.Name
	}
	return l
}

// start starts l here, on the spawner thread: in its own process group
// (so that a stop reaches grandchildren) and killed by the kernel when this
// process dies (see spawn.go).
func (l launch) start(ctx context.Context, log *slog.Logger) (*exec.Cmd, error) {
	cmd := &exec.Cmd{
		Path: l.Path,
		Args: l.Args,
		Env:  l.Env,
		Dir:  l.Dir,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if l.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(l.LogPath), 0o755); err != nil {
			return nil, fmt.Errorf("creating log directory: %w", err)
		}
		logFile, err := os.OpenFile(l.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening log file: %w", err)
		}
		// The child holds its own descriptor once started.
		defer func() {
			if err := logFile.Close(); err != nil {
				log.Warn("closing log file failed", "path", l.LogPath, "error", err)
			}
		}()
		cmd.Stdout, cmd.Stderr = logFile, logFile
	}
	if err := spawn(ctx, cmd, l.Nice); err != nil {
		return nil, err
	}
	return cmd, nil
}

// child is one running instance of a Process's binary.
type child interface {
	pid() int
	// wait blocks until the child has exited and returns log attributes
	// that say how it ended.
	wait() []any
}

// ownChild is a child this process started and waits for.
type ownChild struct{ cmd *exec.Cmd }

func (c ownChild) pid() int { return c.cmd.Process.Pid }

func (c ownChild) wait() []any {
	err := c.cmd.Wait()
	return exitAttrs(c.cmd, c.pid(), err)
}

// startLocked starts a child (or, with a Holder, takes over the one a
// previous supervisor left running) and its readiness probe. The caller
// holds p.mu, so that Stop sees either no child or its pid.
func (p *Process) startLocked(ctx context.Context) (child, context.CancelFunc, error) {
	var (
		c       child
		adopted bool
	)
	l := p.launch()
	root := l.Root
	if p.holder != nil {
		if l.Env == nil {
			l.Env = os.Environ() // this process's, not the holder's
		}
		held, ans, err := p.holder.start(ctx, l)
		if err != nil {
			return nil, nil, err
		}
		c, adopted = held, ans.Adopted
		if adopted && ans.Root != "" {
			root = ans.Root // a holder of an older fke says none: its hand-overs run l exactly
		}
	} else {
		cmd, err := l.start(ctx, p.log)
		if err != nil {
			return nil, nil, err
		}
		c = ownChild{cmd}
	}
	p.gen++
	p.probeErr = nil
	p.pid = c.pid()
	p.adopted, p.root = adopted, root
	p.setStateLocked(Starting)
	if adopted {
		p.log.Info("process adopted: it ran on while no supervisor did", "pid", p.pid, "path", p.path, "root", root)
		if canRenice {
			if err := renice(p.pid, p.spec.Nice); err != nil {
				p.log.Warn("setting the niceness of an adopted process failed", "pid", p.pid, "error", err)
			}
		}
	} else {
		p.log.Info("process started", "pid", p.pid, "restarts", p.restarts, "path", p.path)
	}
	probeCtx, cancel := context.WithCancel(context.Background())
	if p.spec.Ready == nil {
		p.setStateLocked(Ready)
		p.log.Info("process ready", "pid", p.pid)
	} else {
		go p.probe(probeCtx, p.gen, p.pid)
	}
	return c, cancel, nil
}

// probe polls Spec.Ready until it succeeds or ctx (the child's run) ends.
func (p *Process) probe(ctx context.Context, gen, pid int) {
	started := time.Now()
	for {
		next := time.Now().Add(readyPollDelay(time.Since(started)))
		callCtx, cancel := context.WithTimeout(ctx, readyProbeTimeout)
		err := p.spec.Ready(callCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			p.mu.Lock()
			if p.gen == gen && p.state == Starting {
				p.probeErr = nil
				p.setStateLocked(Ready)
				p.log.Info("process ready", "pid", pid)
			}
			p.mu.Unlock()
			return
		}
		p.mu.Lock()
		if p.gen == gen {
			p.probeErr = err
		}
		p.mu.Unlock()
		p.log.Debug("process not ready", "pid", pid, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
	}
}

// readyPollDelay is the time between two calls of Spec.Ready, elapsed
// after the start.
func readyPollDelay(elapsed time.Duration) time.Duration {
	if elapsed < readyFastPollFor {
		return readyPollInterval
	}
	return readySlowPollInterval
}

// run waits for the child and restarts it with backoff until Stop or
// MaxRestarts.
func (p *Process) run(c child, cancelProbe context.CancelFunc) {
	defer close(p.done)
	backoff := p.spec.MinBackoff
	for {
		started := time.Now()
		attrs := c.wait()
		cancelProbe()
		killGroup(p.log, c.pid(), syscall.SIGKILL) // whatever the child left behind

		p.mu.Lock()
		p.pid = 0
		if p.stopping {
			p.setStateLocked(Stopped)
			p.mu.Unlock()
			p.log.Info("process stopped", attrs...)
			return
		}
		if time.Since(started) > backoffResetAfter {
			backoff = p.spec.MinBackoff
		}
		p.setStateLocked(Backoff)
		restarts := p.restarts
		p.mu.Unlock()
		p.log.Warn("process exited unexpectedly", append(attrs, "restarts", restarts, "backoff", backoff)...)

		for {
			if p.failIfExhausted() {
				return
			}
			timer := time.NewTimer(backoff)
			select {
			case <-p.stopCh:
				timer.Stop()
				p.mu.Lock()
				p.setStateLocked(Stopped)
				p.mu.Unlock()
				p.log.Info("process stopped", "state", Backoff)
				return
			case <-timer.C:
			}
			backoff = min(2*backoff, p.spec.MaxBackoff)
			p.beforeRestart()

			p.mu.Lock()
			if p.stopping {
				p.setStateLocked(Stopped)
				p.mu.Unlock()
				p.log.Info("process stopped", "state", Backoff)
				return
			}
			p.attempts++
			var err error
			c, cancelProbe, err = p.startLocked(context.Background())
			if err == nil {
				p.restarts++
				p.mu.Unlock()
				break
			}
			p.err = err
			attempts := p.attempts
			p.mu.Unlock()
			p.log.Error("process restart failed", "attempts", attempts, "backoff", backoff, "error", err)
		}
	}
}

// beforeRestart runs Spec.BeforeRestart, if any, until it returns, Stop
// begins or beforeRestartTimeout passes.
func (p *Process) beforeRestart() {
	if p.spec.BeforeRestart == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), beforeRestartTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := p.spec.BeforeRestart(ctx); err != nil {
		p.log.Warn("preparing restart failed, restarting anyway", "error", err)
	}
}

// failIfExhausted marks the process Failed when MaxRestarts attempts are
// spent.
func (p *Process) failIfExhausted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spec.MaxRestarts <= 0 || p.attempts < p.spec.MaxRestarts {
		return false
	}
	if p.err == nil {
		p.err = fmt.Errorf("exited after %d restart attempts", p.attempts)
	}
	p.setStateLocked(Failed)
	p.log.Error("process failed", "restarts", p.restarts, "attempts", p.attempts, "error", p.err)
	return true
}

func exitAttrs(cmd *exec.Cmd, pid int, waitErr error) []any {
	attrs := []any{"pid", pid, "exit_code", cmd.ProcessState.ExitCode()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		attrs = append(attrs, "signal", ws.Signal().String())
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		attrs = append(attrs, "error", waitErr)
	}
	return attrs
}

// killGroup signals the process group led by pid. A group that is already
// gone (ESRCH) is not an error.
func killGroup(log *slog.Logger, pid int, sig syscall.Signal) {
	if pid <= 0 {
		return
	}
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		log.Warn("signalling process group failed", "pgid", pid, "signal", sig.String(), "error", err)
	}
}

// stop ends the process: SIGTERM to its group, SIGKILL after the grace
// period (shortened to fit ctx's deadline), then waits until it is gone.
func (p *Process) stop(ctx context.Context) error {
	p.mu.Lock()
	if !p.stopping {
		p.stopping = true
		close(p.stopCh)
	}
	pid := p.pid
	p.mu.Unlock()

	select {
	case <-p.done:
		return nil
	default:
	}
	if pid != 0 {
		p.log.Info("stopping process", "pid", pid)
		killGroup(p.log, pid, syscall.SIGTERM)
	}
	grace := p.spec.GracePeriod
	if deadline, ok := ctx.Deadline(); ok {
		grace = min(grace, time.Until(deadline)*9/10)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if pid != 0 {
		p.log.Warn("process ignored SIGTERM, killing", "pid", pid, "grace_period", grace)
		killGroup(p.log, pid, syscall.SIGKILL)
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping %s: %w", p.spec.Name, ctx.Err())
	}
}
