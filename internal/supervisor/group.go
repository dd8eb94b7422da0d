// Package supervisor runs child processes: it starts them, polls their
// readiness, restarts them with exponential backoff when they exit
// unexpectedly, and stops them (SIGTERM, then SIGKILL) with everything they
// spawned.
//
// Every child runs in its own process group and is killed by the kernel
// (Pdeathsig) if the process that started it dies, so a crashed fke leaves
// no orphaned etcd or kube-apiserver behind. A Group may have a Holder in
// another process start its children instead (HoldIn): they then outlive
// the supervising process, but not the holder. Linux only.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// Group supervises several named processes. Its methods are safe for
// concurrent use.
type Group struct {
	log *slog.Logger

	mu     sync.Mutex
	holder *HolderClient
	procs  map[string]*Process
	order  []string // names in start order
}

// NewGroup returns an empty Group that logs to log (nil discards).
func NewGroup(log *slog.Logger) *Group {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Group{log: log, procs: map[string]*Process{}}
}

// Start starts the child described by spec and returns at once; use
// Process.WaitReady to wait for readiness. It fails when a process of the
// same name is still supervised (not Stopped or Failed), when the binary is
// missing, or when the child cannot be started. ctx bounds only the start:
// the process runs, and is restarted, until Stop or StopAll.
func (g *Group) Start(ctx context.Context, spec Spec) (*Process, error) {
	if spec.Name == "" {
		return nil, errors.New("starting process: empty name")
	}
	if spec.Path == "" {
		return nil, fmt.Errorf("starting %s: empty path", spec.Name)
	}
	spec = spec.withDefaults()
	path, err := resolveBinary(spec)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", spec.Name, err)
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	if old, ok := g.procs[spec.Name]; ok {
		select {
		case <-old.done:
		default:
			return nil, fmt.Errorf("starting %s: process %s already running", spec.Name, spec.Name)
		}
	}
	p := newProcess(spec, path, g.log)
	p.holder = g.holder
	p.mu.Lock()
	c, cancelProbe, err := p.startLocked(ctx)
	p.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", spec.Name, err)
	}
	g.procs[spec.Name] = p
	g.order = append(slices.DeleteFunc(g.order, func(n string) bool { return n == spec.Name }), spec.Name)
	go p.run(c, cancelProbe)
	return p, nil
}

// HoldIn has h start the children this group starts from now on (see
// Holder): they survive this process and a later supervisor in its place
// takes them over. Call it before the first Start.
func (g *Group) HoldIn(h *HolderClient) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holder = h
}

// Get returns the process named name, or nil if the group never started one.
// A stopped process stays available until a new one of its name starts.
func (g *Group) Get(name string) *Process {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.procs[name]
}

// Stop stops the process named name and waits until it and its process group
// are gone: SIGTERM to the group, then SIGKILL after Spec.GracePeriod (or
// sooner, to fit ctx's deadline). It is not restarted afterwards. Stopping an
// unknown or already stopped process returns nil.
func (g *Group) Stop(ctx context.Context, name string) error {
	p := g.Get(name)
	if p == nil {
		return nil
	}
	return p.stop(ctx)
}

// StopLeftIn stops the children that an earlier supervisor left in this
// group's holder (see HoldIn) and that this group has not taken over,
// whose log file lies in dir: the processes of something deleted before
// this group started them again. Nothing to do without a holder: children
// die with the process that started them.
func (g *Group) StopLeftIn(ctx context.Context, dir string) error {
	g.mu.Lock()
	h := g.holder
	g.mu.Unlock()
	if h == nil {
		return nil
	}
	if err := h.stopLeft(ctx, dir); err != nil {
		return fmt.Errorf("stopping the processes left in %s: %w", dir, err)
	}
	return nil
}

// StopAll stops every process in reverse start order, one at a time, and
// returns the errors of those that did not stop.
func (g *Group) StopAll(ctx context.Context) error {
	g.mu.Lock()
	procs := make([]*Process, 0, len(g.order))
	for _, name := range slices.Backward(g.order) {
		procs = append(procs, g.procs[name])
	}
	g.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if err := p.stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
