package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/supervisor"
)

// addonDir is where the files of an addon process of a control plane live.
func (l layout) addonDir(name string) string { return filepath.Join(l.root, "addons", name) }

func addonProcessName(key, addon string) string { return key + "/addon/" + addon }

// addonBindAddress: addon processes listen on loopback, where the API
// server beside them calls them.
const addonBindAddress = "127.0.0.1"

// EnsureAddons implements controlplane.Runtime.
func (r *Runtime) EnsureAddons(ctx context.Context, key string, addons []controlplane.Addon) (controlplane.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.running[key]; !ok {
		return controlplane.Status{}, fmt.Errorf("addons of %s: the control plane does not run", key)
	}
	layout := newLayout(r.DataDir(key))
	current := r.addons[key]
	want := map[string]bool{}
	var errs []error
	for _, a := range addons {
		want[a.Name] = true
		if err := r.ensureAddonLocked(ctx, key, layout, current[a.Name], a); err != nil {
			errs = append(errs, fmt.Errorf("addon %s of %s: %w", a.Name, key, err))
		}
	}
	for name := range current {
		if want[name] {
			continue
		}
		if err := r.removeAddonLocked(ctx, key, layout, name); err != nil {
			errs = append(errs, fmt.Errorf("removing addon %s of %s: %w", name, key, err))
		}
	}
	return r.statusLocked(key), errors.Join(errs...)
}

// ensureAddonLocked starts a, restarting it when old (what runs) differs.
func (r *Runtime) ensureAddonLocked(ctx context.Context, key string, layout layout, old *controlplane.Addon, a controlplane.Addon) error {
	name := addonProcessName(key, a.Name)
	p := r.group.Get(name)
	if old != nil && sameAddon(*old, a) && p != nil && p.State() != supervisor.Stopped {
		return nil
	}
	if p != nil {
		if err := r.group.Stop(ctx, name); err != nil {
			return fmt.Errorf("stopping the old process: %w", err)
		}
	}
	path, err := r.finder.Path(a.Binary)
	if err != nil {
		return err
	}
	dir := layout.addonDir(a.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for file, data := range a.Files {
		if file != filepath.Base(file) {
			return fmt.Errorf("file name %q is not a base name", file)
		}
		if err := writeIfChanged(filepath.Join(dir, file), data); err != nil {
			return err
		}
	}
	args := a.ExpandArgs(dir, addonBindAddress)
	spec := supervisor.Spec{Name: name, Root: layout.root, Path: path, Args: args, Env: componentEnv(a.Name), LogPath: layout.log(a.Name)}
	if a.HealthURL != "" {
		tlsCfg, err := supervisor.ClientTLS(a.HealthCA, a.HealthClientCert, a.HealthClientKey)
		if err != nil {
			return fmt.Errorf("health check of %s: %w", a.HealthURL, err)
		}
		tlsCfg.ServerName = a.HealthServerName
		spec.Ready = supervisor.WaitHTTPReady(a.HealthURL, tlsCfg)
	}
	if _, err := r.group.Start(ctx, spec); err != nil {
		return fmt.Errorf("starting: %w", err)
	}
	if r.addons[key] == nil {
		r.addons[key] = map[string]*controlplane.Addon{}
	}
	kept := a
	r.addons[key][a.Name] = &kept
	r.log.Info("started addon process", "cluster", key, "addon", a.Name)
	return nil
}

// removeAddonLocked stops the addon process name of key and removes its files.
func (r *Runtime) removeAddonLocked(ctx context.Context, key string, layout layout, name string) error {
	if r.group.Get(addonProcessName(key, name)) != nil {
		if err := r.group.Stop(ctx, addonProcessName(key, name)); err != nil {
			return err
		}
	}
	delete(r.addons[key], name)
	if err := os.RemoveAll(layout.addonDir(name)); err != nil {
		return err
	}
	r.log.Info("removed addon process", "cluster", key, "addon", name)
	return nil
}

// stopAddonsLocked stops every addon process of key (keeping their files).
func (r *Runtime) stopAddonsLocked(ctx context.Context, key string) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(r.addons[key])) {
		if r.group.Get(addonProcessName(key, name)) == nil {
			continue
		}
		if err := r.group.Stop(ctx, addonProcessName(key, name)); err != nil {
			errs = append(errs, fmt.Errorf("stopping addon %s: %w", name, err))
		}
	}
	delete(r.addons, key)
	return errors.Join(errs...)
}

// addonStatusLocked reports the addon processes of key, by name.
func (r *Runtime) addonStatusLocked(key string) []controlplane.ComponentStatus {
	var out []controlplane.ComponentStatus
	for _, name := range slices.Sorted(maps.Keys(r.addons[key])) {
		cs := controlplane.ComponentStatus{Name: name, Log: "logs/" + name + ".log in the cluster's data directory"}
		if p := r.group.Get(addonProcessName(key, name)); p != nil {
			cs.PID = p.Pid()
			cs.Running = cs.PID != 0
			cs.Ready = p.State() == supervisor.Ready
			cs.Restarts = p.Restarts()
		}
		out = append(out, cs)
	}
	return out
}

func sameAddon(a, b controlplane.Addon) bool {
	return a.Binary == b.Binary && slices.Equal(a.Args, b.Args) && a.Port == b.Port && maps.EqualFunc(a.Files, b.Files, bytes.Equal) &&
		a.HealthURL == b.HealthURL && bytes.Equal(a.HealthCA, b.HealthCA) && a.HealthServerName == b.HealthServerName &&
		bytes.Equal(a.HealthClientCert, b.HealthClientCert) && bytes.Equal(a.HealthClientKey, b.HealthClientKey)
}
