package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/driver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// AllocatableSource reads what the Node reports as allocatable.
type AllocatableSource interface {
	// Allocatable returns the Node's status.allocatable by resource name.
	Allocatable(ctx context.Context) (map[string]int64, error)
}

// ManagerOptions configures a Manager. Zero fields take the defaults noted.
type ManagerOptions struct {
	// Dir is the kubelet's device-plugin directory (config.DefaultPluginDir).
	Dir string
	// KubeletSocket is the registration socket (Dir/kubelet.sock).
	KubeletSocket string
	Policy        gpuconfig.AllocationPolicy
	Strategy      gpuconfig.DeviceListStrategy
	// Driver is what containers get with their GPUs (device nodes, driver
	// libraries); nil for simulated GPUs (the environment only).
	Driver *driver.Driver
	Health HealthSource // AlwaysHealthy
	Log    *slog.Logger // slog.Default()
	// PollInterval is how often the sockets are checked for a kubelet restart (100ms).
	PollInterval time.Duration
	// RegisterTimeout bounds one Register call (5s).
	RegisterTimeout time.Duration
	// SelfCheck, when set, is compared with what we advertise every
	// SelfCheckInterval; a resource that drifts on two checks in a row is
	// re-registered.
	SelfCheck         AllocatableSource
	SelfCheckInterval time.Duration
}

// Manager runs one Plugin per resource, registers them with the kubelet, and
// registers again when the kubelet restarts (its socket re-created, or our
// socket deleted) or when the Node's allocatable drifts from what we advertise.
type Manager struct {
	o       ManagerOptions
	plugins []*Plugin
	log     *slog.Logger

	mu            sync.Mutex
	registrations map[string]int
	kubelet       os.FileInfo
	pending       map[*Plugin]time.Time // plugin → earliest next Register attempt
	backoff       map[*Plugin]time.Duration
	drift         map[string]int
}

// NewManager prepares plugins for resources; nothing listens until Run.
func NewManager(resources []Resource, topo Topology, o ManagerOptions) (*Manager, error) {
	if o.Dir == "" {
		o.Dir = gpuconfig.DefaultPluginDir
	}
	if o.KubeletSocket == "" {
		o.KubeletSocket = filepath.Join(o.Dir, "kubelet.sock")
	}
	if o.Health == nil {
		o.Health = AlwaysHealthy{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 100 * time.Millisecond
	}
	if o.RegisterTimeout <= 0 {
		o.RegisterTimeout = 5 * time.Second
	}
	if o.Policy == "" {
		o.Policy = gpuconfig.AllocationPacked
	}
	if o.Strategy == "" {
		o.Strategy = gpuconfig.DeviceListEnvvar
	}
	m := &Manager{o: o, log: o.Log, registrations: map[string]int{}, pending: map[*Plugin]time.Time{},
		backoff: map[*Plugin]time.Duration{}, drift: map[string]int{}}
	for _, r := range resources {
		if len(r.Devices) == 0 {
			continue
		}
		m.plugins = append(m.plugins, NewPlugin(r, topo, filepath.Join(o.Dir, SocketName(r.Name)), o))
	}
	return m, nil
}

// SocketName is the plugin socket's file name for a resource, e.g. fke-nvidia.com-gpu.sock.
func SocketName(resource string) string {
	return "fke-" + strings.NewReplacer("/", "-", ":", "-").Replace(resource) + ".sock"
}

// Plugins returns the plugins, sorted by resource name.
func (m *Manager) Plugins() []*Plugin { return m.plugins }

// Registrations returns how many times resource was registered successfully.
func (m *Manager) Registrations(resource string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.registrations[resource]
}

// Run serves every plugin and keeps it registered until ctx ends, then
// stops the plugins and removes their sockets.
func (m *Manager) Run(ctx context.Context) error {
	if err := os.MkdirAll(m.o.Dir, 0o750); err != nil {
		return fmt.Errorf("creating plugin dir %s: %w", m.o.Dir, err)
	}
	defer func() {
		for _, p := range m.plugins {
			p.Stop()
		}
	}()
	for _, p := range m.plugins {
		if err := p.Start(); err != nil {
			return fmt.Errorf("starting plugin for %s: %w", p.res.Name, err)
		}
		m.markPending(p)
	}
	t := time.NewTicker(m.o.PollInterval)
	defer t.Stop()
	nextCheck := time.Now().Add(m.o.SelfCheckInterval)
	for {
		m.poll(ctx)
		if m.o.SelfCheck != nil && m.o.SelfCheckInterval > 0 && !time.Now().Before(nextCheck) {
			if _, err := m.SelfCheck(ctx); err != nil {
				m.log.Warn("device plugin self-check failed", "err", err)
			}
			nextCheck = time.Now().Add(m.o.SelfCheckInterval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (m *Manager) markPending(p *Plugin) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending[p] = time.Time{}
	m.backoff[p] = 0
}

// poll notices kubelet restarts and (re-)registers what is pending.
func (m *Manager) poll(ctx context.Context) {
	kinfo, err := os.Stat(m.o.KubeletSocket)
	m.mu.Lock()
	prev := m.kubelet
	m.kubelet = nil
	if err == nil {
		m.kubelet = kinfo
	}
	m.mu.Unlock()
	switch {
	case err == nil && (prev == nil || !os.SameFile(prev, kinfo) || !prev.ModTime().Equal(kinfo.ModTime())):
		m.log.Info("kubelet socket appeared; registering", "socket", m.o.KubeletSocket)
		for _, p := range m.plugins {
			m.markPending(p)
		}
	case err != nil && prev != nil:
		m.log.Warn("kubelet socket gone; waiting for the kubelet", "socket", m.o.KubeletSocket)
	}
	for _, p := range m.plugins {
		if p.SocketIntact() {
			continue
		}
		m.log.Warn("plugin socket removed (kubelet restart?); restarting plugin", "resource", p.res.Name)
		if err := p.Start(); err != nil {
			m.log.Error("restarting plugin", "resource", p.res.Name, "err", err)
			continue
		}
		m.markPending(p)
	}
	if kinfo == nil || err != nil {
		return
	}
	now := time.Now()
	for _, p := range m.plugins {
		m.mu.Lock()
		at, ok := m.pending[p]
		m.mu.Unlock()
		if !ok || now.Before(at) {
			continue
		}
		if err := m.register(ctx, p); err != nil {
			m.mu.Lock()
			b := min(max(2*m.backoff[p], 250*time.Millisecond), 5*time.Second)
			m.backoff[p], m.pending[p] = b, now.Add(b)
			m.mu.Unlock()
			m.log.Warn("registering with kubelet failed; will retry", "resource", p.res.Name, "retryIn", b, "err", err)
			continue
		}
		m.mu.Lock()
		delete(m.pending, p)
		m.registrations[p.res.Name]++
		m.mu.Unlock()
		m.log.Info("registered with kubelet", "resource", p.res.Name, "endpoint", filepath.Base(p.socket))
	}
}

func (m *Manager) register(ctx context.Context, p *Plugin) error {
	conn, err := grpc.NewClient("unix://"+m.o.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to kubelet at %s: %w", m.o.KubeletSocket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, m.o.RegisterTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.socket),
		ResourceName: p.res.Name,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("registering %s with kubelet: %w", p.res.Name, err)
	}
	return nil
}

// SelfCheck compares what each plugin advertises as healthy with the Node's
// allocatable and restarts and re-registers a plugin whose resource drifted
// on two checks in a row (one check may just see the kubelet lagging). It
// returns the resources that drifted on this check.
func (m *Manager) SelfCheck(ctx context.Context) ([]string, error) {
	if m.o.SelfCheck == nil {
		return nil, errors.New("no allocatable source configured")
	}
	alloc, err := m.o.SelfCheck.Allocatable(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading node allocatable: %w", err)
	}
	advertised := map[string]int{}
	for _, p := range m.plugins {
		advertised[p.res.Name] = p.HealthyCount()
	}
	drifted := Drift(advertised, alloc)
	isDrifted := map[string]bool{}
	for _, r := range drifted {
		isDrifted[r] = true
	}
	for _, p := range m.plugins {
		name := p.res.Name
		m.mu.Lock()
		_, pending := m.pending[p]
		if !isDrifted[name] || pending {
			m.drift[name] = 0
			m.mu.Unlock()
			continue
		}
		m.drift[name]++
		n := m.drift[name]
		m.mu.Unlock()
		m.log.Warn("node allocatable differs from advertised devices", "resource", name, "advertised", advertised[name], "allocatable", alloc[name], "consecutive", n)
		if n < 2 {
			continue
		}
		m.mu.Lock()
		m.drift[name] = 0
		m.mu.Unlock()
		if err := p.Start(); err != nil {
			return drifted, fmt.Errorf("restarting plugin %s after drift: %w", name, err)
		}
		m.markPending(p)
	}
	return drifted, nil
}

// Drift lists, sorted, the advertised resources whose healthy count differs
// from the Node's allocatable (a missing allocatable entry counts as 0).
func Drift(advertised map[string]int, allocatable map[string]int64) []string {
	var out []string
	for name, n := range advertised {
		if allocatable[name] != int64(n) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
