// Package local runs tenant control planes as supervised processes on this
// machine: etcd, kube-apiserver, kube-controller-manager and kube-scheduler per
// cluster, with its own PKI, ports and data directory, in one process
// (fke-kube-plane) or in one process each (see plane.go).
package local

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
)

// Runtime runs control planes as child processes of the calling process.
// Their data lives under <Dir>/<namespace>/<name>.
type Runtime struct {
	dir    string
	bins   map[string]string
	finder binaries.Finder
	// plane is fke-kube-plane's path, set by OneProcessPlanes; while it is
	// empty, new planes run their components as separate processes.
	plane string
	group *supervisor.Group
	log   *slog.Logger

	mu      sync.Mutex
	running map[string]controlplane.Spec // by key
	// procs are the running components of each key: component -> the
	// process name (it changes when Upgrade replaces a component) and
	// version.
	procs map[string]map[string]componentProc
	// addons are the addon processes started by EnsureAddons, by key and name.
	addons map[string]map[string]*controlplane.Addon
}

var _ controlplane.Runtime = (*Runtime)(nil)

// New returns a Runtime keeping data under dir. It fails when an upstream
// binary is missing.
func New(dir string, finder binaries.Finder, log *slog.Logger) (*Runtime, error) {
	bins, err := finder.Paths(binaries.Etcd, binaries.KubeAPIServer, binaries.KubeControllerManager, binaries.KubeScheduler)
	if err != nil {
		return nil, err
	}
	return &Runtime{
		dir:     dir,
		bins:    bins,
		finder:  finder,
		group:   supervisor.NewGroup(log),
		log:     log,
		running: map[string]controlplane.Spec{},
		procs:   map[string]map[string]componentProc{},
		addons:  map[string]map[string]*controlplane.Addon{},
	}, nil
}

// OneProcessPlanes has the new control planes of the default version run
// their four components in one fke-kube-plane process (see plane.go);
// planes keep the layout they started with. It fails when fke-kube-plane
// is missing. Call it before the first Ensure.
func (r *Runtime) OneProcessPlanes() error {
	path, err := r.finder.Path(binaries.KubePlane)
	if err != nil {
		return fmt.Errorf("one-process control planes: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plane = path
	return nil
}

// HoldProcessesIn has the holder behind c run the control planes' processes
// (see supervisor.Holder): they serve on while this process is down, and a
// Runtime in a later process takes them over when it ensures the same
// control plane. Call it before the first Ensure.
func (r *Runtime) HoldProcessesIn(c *supervisor.HolderClient) { r.group.HoldIn(c) }

// componentProc is a running component: its process name and version.
type componentProc struct{ name, version string }

// procName returns the process name of component of key; r.mu is held.
func (r *Runtime) procName(key, component string) string {
	if p, ok := r.procs[key][component]; ok {
		return p.name
	}
	return processName(key, component)
}

// startVersion is the version component of spec starts at.
func startVersion(spec controlplane.Spec, component string) string {
	if component == controlplane.Etcd {
		return ""
	}
	if v := spec.ComponentVersions[component]; v != "" {
		return v
	}
	return spec.Version
}

// binary returns the executable of component at version.
func (r *Runtime) binary(component, version string) (string, error) {
	if component == controlplane.Etcd {
		return r.bins[binaries.Etcd], nil
	}
	// Component names are their binaries' names.
	return r.finder.PathFor(version, component)
}

// DataDir returns the directory holding the data of key.
func (r *Runtime) DataDir(key string) string {
	return filepath.Join(r.dir, filepath.FromSlash(key))
}

func processName(key, component string) string { return key + "/" + component }

// slot is the supervisor.Spec.Slot of component: its port, which stays when
// a standby plane becomes a cluster's and when the component is upgraded.
func slot(spec controlplane.Spec, component string) string {
	port := map[string]int{
		controlplane.Etcd:              spec.Ports.EtcdClient,
		controlplane.APIServer:         spec.Ports.APIServer,
		controlplane.ControllerManager: spec.Ports.ControllerManager,
		controlplane.Scheduler:         spec.Ports.Scheduler,
	}[component]
	return "127.0.0.1:" + strconv.Itoa(port)
}

// Ensure implements controlplane.Runtime. etcd and the API server start at
// once (the API server retries etcd); the controller manager and the
// scheduler start at the first Ensure that finds the API server ready.
func (r *Runtime) Ensure(ctx context.Context, spec controlplane.Spec) (controlplane.Status, error) {
	if err := encryption.Validate(spec.PKI[encryption.ConfigFile]); err != nil {
		return controlplane.Status{}, fmt.Errorf("control plane %s: PKI bundle, %s: %w", spec.Key, encryption.ConfigFile, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.adoptedAway(spec.Key) {
		// Its data and processes belong to the cluster that adopted it;
		// starting it again would run a second copy on the same ports.
		return controlplane.Status{}, fmt.Errorf("control plane %s was adopted by a cluster", spec.Key)
	}
	if old, ok := r.running[spec.Key]; ok && (old.Ports != spec.Ports || old.NodeAddress != spec.NodeAddress) {
		// The ports (should not happen) or the advertised address changed:
		// restart everything.
		if err := r.stopLocked(ctx, spec.Key); err != nil {
			return controlplane.Status{}, err
		}
	}
	layout := newLayout(r.DataDir(spec.Key))
	// The files only change with the spec: the periodic Ensure of a running
	// control plane does not re-read and compare them.
	if old, ok := r.running[spec.Key]; !ok || !sameFiles(old, spec) {
		if err := layout.write(spec); err != nil {
			return controlplane.Status{}, fmt.Errorf("writing control-plane files of %s: %w", spec.Key, err)
		}
	}
	// Chosen before a restore fills etcd's data directory.
	processes, err := r.layoutOf(spec, layout)
	if err != nil {
		return controlplane.Status{}, err
	}
	if spec, err = withClusterName(spec, layout); err != nil {
		return controlplane.Status{}, err
	}
	if spec.Restore != "" {
		if err := r.restore(ctx, layout, spec); err != nil {
			return controlplane.Status{}, fmt.Errorf("control plane %s: %w", spec.Key, err)
		}
	}
	return r.startMissing(ctx, spec, layout, processes)
}

// restore fills etcd's data directory from spec.Restore with etcdutl when
// it does not exist yet (the first start of a cluster made from a backup).
func (r *Runtime) restore(ctx context.Context, l layout, spec controlplane.Spec) error {
	if _, err := os.Stat(l.etcdData()); err == nil {
		return nil
	}
	if keys, err := backup.IsKeys(spec.Restore); err != nil {
		return fmt.Errorf("restoring etcd from %s: %w", spec.Restore, err)
	} else if keys {
		return fmt.Errorf("snapshot %s is a key export of a hosted control plane: restore it into a cluster of the hosted runtime; the local runtime restores etcd snapshots", filepath.Base(spec.Restore))
	}
	etcdutl, err := r.finder.Path(binaries.Etcdutl)
	if err != nil {
		return fmt.Errorf("restoring etcd from %s: %w", spec.Restore, err)
	}
	tmp := l.etcdData() + ".restoring"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	peer := "https://127.0.0.1:" + strconv.Itoa(spec.Ports.EtcdPeer)
	cmd := exec.CommandContext(ctx, etcdutl, "snapshot", "restore", spec.Restore, "--data-dir="+tmp,
		"--name=default", "--initial-cluster=default="+peer, "--initial-advertise-peer-urls="+peer)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("restoring etcd from %s: %w: %s", spec.Restore, err, bytes.TrimSpace(out))
	}
	if err := os.Rename(tmp, l.etcdData()); err != nil {
		return fmt.Errorf("restoring etcd: %w", err)
	}
	r.log.Info("etcd restored from a snapshot", "cluster", spec.Key, "snapshot", spec.Restore)
	return nil
}

// Snapshot takes an etcd snapshot of spec.Key's etcd, on its loopback
// client port.
func (r *Runtime) Snapshot(ctx context.Context, spec controlplane.Spec, d backup.Dir, now time.Time, uid string) (backup.Snapshot, error) {
	if spec.Ports.EtcdClient == 0 {
		return backup.Snapshot{}, fmt.Errorf("control plane %s has no etcd port yet", spec.Key)
	}
	return backup.TakeCluster(ctx, spec.PKI, spec.Ports.EtcdClient, d, now, uid)
}

// startMissing starts the components of spec that do not run; r.mu is held.
func (r *Runtime) startMissing(ctx context.Context, spec controlplane.Spec, layout layout, processes string) (controlplane.Status, error) {
	tlsCfg, err := clientTLS(spec.PKI, pki.EtcdCACertFile, pki.APIServerEtcdClient)
	if err != nil {
		return controlplane.Status{}, err
	}
	apiTLS, err := clientTLS(spec.PKI, pki.CACertFile, pki.Manager)
	if err != nil {
		return controlplane.Status{}, err
	}
	ready := map[string]func(context.Context) error{
		controlplane.Etcd:              supervisor.WaitHTTPReady(fmt.Sprintf("https://127.0.0.1:%d/readyz", spec.Ports.EtcdClient), tlsCfg),
		controlplane.APIServer:         supervisor.WaitHTTPReady(endpoint(spec)+"/readyz", apiTLS),
		controlplane.ControllerManager: supervisor.WaitHTTPReady("https://127.0.0.1:"+strconv.Itoa(spec.Ports.ControllerManager)+"/healthz", selfSignedTLS()),
		controlplane.Scheduler:         supervisor.WaitHTTPReady("https://127.0.0.1:"+strconv.Itoa(spec.Ports.Scheduler)+"/healthz", selfSignedTLS()),
	}
	if r.procs[spec.Key] == nil {
		r.procs[spec.Key] = map[string]componentProc{}
	}
	if processes == LayoutCombined {
		if r.plane == "" {
			return controlplane.Status{}, fmt.Errorf("control plane %s runs in one process (%s), which this manager does not run: start it with --one-process-planes", spec.Key, binaries.KubePlane)
		}
		if err := r.startPlane(ctx, spec, layout, ready); err != nil {
			return controlplane.Status{}, err
		}
		r.running[spec.Key] = spec
		return r.statusLocked(spec.Key), nil
	}
	for _, c := range controlplane.Components {
		name := r.procName(spec.Key, c)
		if p := r.group.Get(name); p != nil && p.State() != supervisor.Stopped {
			continue
		}
		if (c == controlplane.ControllerManager || c == controlplane.Scheduler) && !r.apiServerServes(spec.Key) {
			// Clients of the API server wait for it: started beside it,
			// they take the CPU its start needs (on a small machine, a
			// large share of it) only to retry. The next Ensure (the
			// cluster controller calls it every 200 ms until ready)
			// starts them. An API server taken over from an earlier
			// fke-manager serves already: its clients, most likely
			// left running too, are taken over with it.
			continue
		}
		version := startVersion(spec, c)
		path, err := r.binary(c, version)
		if err != nil {
			return controlplane.Status{}, fmt.Errorf("starting %s of %s: %w", c, spec.Key, err)
		}
		s := supervisor.Spec{Name: name, Slot: slot(spec, c), Root: layout.root, Path: path, Args: componentArgs(c, layout, spec), Env: componentEnv(c), LogPath: layout.log(c), Ready: ready[c]}
		if spec.Standby {
			s.Nice = standbyNice
		}
		if _, err := r.group.Start(ctx, s); err != nil {
			return controlplane.Status{}, fmt.Errorf("starting %s: %w", s.Name, err)
		}
		r.procs[spec.Key][c] = componentProc{name: name, version: version}
		r.log.Info("started control-plane component", "cluster", spec.Key, "component", c, "version", version)
	}
	r.running[spec.Key] = spec
	return r.statusLocked(spec.Key), nil
}

// apiServerServes reports whether the API server of key serves: it is
// ready, or was taken over from an earlier fke-manager, which it served
// under, and not found unready since; r.mu is held.
func (r *Runtime) apiServerServes(key string) bool {
	p := r.group.Get(r.procName(key, controlplane.APIServer))
	return p != nil && (p.State() == supervisor.Ready || p.Adopting())
}

// Status implements controlplane.Runtime.
func (r *Runtime) Status(_ context.Context, key string) (controlplane.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.statusLocked(key), nil
}

// Addresses: the local runtime's API server listens on loopback, is
// reached by nodes at spec.NodeAddress, and by pods at the kubernetes
// Service's first IP; etcd listens on loopback only.
func (r *Runtime) Addresses(_ context.Context, spec controlplane.Spec) (controlplane.Addresses, error) {
	ips, err := controlplane.APIServerIPs(spec.ServiceCIDR, spec.NodeAddress)
	if err != nil {
		return controlplane.Addresses{}, fmt.Errorf("API server addresses (service CIDR %q): %w", spec.ServiceCIDR, err)
	}
	return controlplane.Addresses{APIServerIPs: ips}, nil
}

func (r *Runtime) statusLocked(key string) controlplane.Status {
	spec, ok := r.running[key]
	if !ok {
		return controlplane.Status{}
	}
	st := controlplane.Status{Endpoint: endpoint(spec)}
	for _, c := range controlplane.Components {
		cs := controlplane.ComponentStatus{Name: c, Version: r.procs[key][c].version}
		if p := r.group.Get(r.procName(key, c)); p != nil {
			state := p.State()
			cs.PID = p.Pid()
			cs.Running = cs.PID != 0
			cs.Ready = state == supervisor.Ready
			cs.Adopted = p.Adopted()
			cs.Adopting = p.Adopting()
			cs.Restarts = p.Restarts()
		}
		st.Components = append(st.Components, cs)
	}
	st.Addons = r.addonStatusLocked(key)
	st.AddonNetwork = controlplane.AddonNetwork{APIServer: st.Endpoint, BindAddress: addonBindAddress}
	return st
}

// WaitReady blocks until every component of key is ready or ctx ends; it
// starts the components that wait for the API server once it serves.
func (r *Runtime) WaitReady(ctx context.Context, key string) error {
	for _, c := range controlplane.Components {
		r.mu.Lock()
		if spec, ok := r.running[key]; ok && c == controlplane.ControllerManager {
			l := newLayout(r.DataDir(key))
			processes, err := r.layoutOf(spec, l)
			if err == nil {
				_, err = r.startMissing(ctx, spec, l, processes)
			}
			if err != nil {
				r.mu.Unlock()
				return err
			}
		}
		p := r.group.Get(r.procName(key, c))
		r.mu.Unlock()
		if p == nil {
			return fmt.Errorf("control plane %s is not running", key)
		}
		if err := p.WaitReady(ctx); err != nil {
			return fmt.Errorf("waiting for %s of %s: %w", c, key, err)
		}
	}
	return nil
}

// SetAsideData implements controlplane.Runtime: etcd's data directory
// becomes etcd.replaced-<unix time> beside it.
func (r *Runtime) SetAsideData(ctx context.Context, key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.stopLocked(ctx, key); err != nil {
		return err
	}
	data := newLayout(r.DataDir(key)).etcdData()
	if _, err := os.Stat(data); os.IsNotExist(err) {
		return nil
	}
	aside := data + ".replaced-" + strconv.FormatInt(time.Now().Unix(), 10)
	if err := os.Rename(data, aside); err != nil {
		return fmt.Errorf("setting etcd data of %s aside: %w", key, err)
	}
	r.log.Info("etcd data set aside for a restore", "cluster", key, "kept", aside)
	return nil
}

// Stop implements controlplane.Runtime.
func (r *Runtime) Stop(ctx context.Context, key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopLocked(ctx, key)
}

func (r *Runtime) stopLocked(ctx context.Context, key string) error {
	var errs []error
	// Addons first: they are clients of the API server.
	if err := r.stopAddonsLocked(ctx, key); err != nil {
		errs = append(errs, err)
	}
	// Reverse order: clients before the API server, the API server before etcd.
	for i := len(controlplane.Components) - 1; i >= 0; i-- {
		name := r.procName(key, controlplane.Components[i])
		if r.group.Get(name) == nil {
			continue
		}
		if err := r.group.Stop(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", name, err))
		}
	}
	// Those an fke-manager before this one left running in the process
	// holder, and this one has not taken over yet (a cluster deleted
	// right after a restart). Not those of a standby plane adopted away:
	// they are its adopter's.
	if !r.adoptedAway(key) {
		if err := r.group.StopLeftIn(ctx, r.DataDir(key)); err != nil {
			errs = append(errs, err)
		}
	}
	delete(r.running, key)
	delete(r.procs, key)
	return errors.Join(errs...)
}

// Delete implements controlplane.Runtime.
func (r *Runtime) Delete(ctx context.Context, key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.stopLocked(ctx, key); err != nil {
		return err
	}
	dir := r.DataDir(key)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing data of %s: %w", key, err)
	}
	// The namespace's directory goes with its last cluster.
	if parent := filepath.Dir(dir); parent != filepath.Clean(r.dir) {
		if err := os.Remove(parent); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("removing the empty directory of namespace %s: %w", filepath.Base(parent), err)
		}
	}
	return nil
}

// StopAll stops every control plane, keeping data (process shutdown).
func (r *Runtime) StopAll(ctx context.Context) error {
	return r.group.StopAll(ctx)
}

func endpoint(spec controlplane.Spec) string {
	return "https://127.0.0.1:" + strconv.Itoa(spec.Ports.APIServer)
}

// clientTLS builds a client TLS config trusting caFile and presenting the pair base.
func clientTLS(b pki.Bundle, caFile, base string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b[caFile]) {
		return nil, fmt.Errorf("bundle has no usable %s", caFile)
	}
	kp, err := b.KeyPair(base)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp.TLSCertificate()}, MinVersion: tls.VersionTLS12}, nil
}

// selfSignedTLS is for the health endpoints of kube-controller-manager and
// kube-scheduler, which serve a self-signed certificate on loopback.
func selfSignedTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // loopback health check only
}

// sameFiles reports whether two specs write the same files.
func sameFiles(a, b controlplane.Spec) bool {
	return a.Ports == b.Ports && a.PodCIDR == b.PodCIDR && a.ServiceCIDR == b.ServiceCIDR &&
		maps.EqualFunc(a.PKI, b.PKI, bytes.Equal)
}
