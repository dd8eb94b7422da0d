package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/supervisor"
	"fke.dev/fke/internal/versions"
)

// A control plane's processes come in one of two layouts, chosen when it
// first starts and kept for its life (recorded in its data directory):
//
//   - Combined: one fke-kube-plane process runs etcd, kube-apiserver,
//     kube-controller-manager and kube-scheduler, upstream's code linked
//     into one binary (cmd/fke-kube-plane). The four share one Go runtime and
//     one copy of the API types, so an idle tenant holds markedly less
//     memory than the four would as separate processes (bench/README.md).
//     It is built for the default Kubernetes version only, so its
//     components are not upgraded one by one.
//   - Separate: one process per component, each of its own version; the
//     layout of planes on another version, of those upgraded from one, and
//     of every plane unless OneProcessPlanes turned the combined one on.
const (
	LayoutCombined = "combined"
	LayoutSeparate = "separate"
)

// layoutFileName is the file in a control plane's data directory that
// records its layout.
const layoutFileName = "processes"

// planeProcess names the combined plane's process (key/plane).
const planeProcess = "plane"

// layoutFile records a control plane's layout in its data directory.
func (l layout) layoutFile() string { return filepath.Join(l.root, layoutFileName) }

// RecordedLayout returns the layout recorded in the data directory dir of
// a control plane (LayoutCombined or LayoutSeparate), or "" when none is.
func RecordedLayout(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, layoutFileName))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the process layout: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// chooseLayout decides the layout of a control plane (pure): the recorded
// one when there is one; else separate for a plane that already has data
// (it ran before layouts were recorded) or runs a component at another
// version than the combined binary's, or when the combined binary is not
// offered; else combined.
func chooseLayout(recorded string, planeOffered, hasData bool, componentVersions []string) string {
	if recorded == LayoutCombined || recorded == LayoutSeparate {
		return recorded
	}
	if !planeOffered || hasData {
		return LayoutSeparate
	}
	for _, v := range componentVersions {
		if v != "" && v != versions.Default {
			return LayoutSeparate
		}
	}
	return LayoutCombined
}

// layoutOf returns the layout of spec's plane, recording it on the plane's
// first start; r.mu is held.
func (r *Runtime) layoutOf(spec controlplane.Spec, l layout) (string, error) {
	recorded, err := RecordedLayout(l.root)
	if err != nil {
		return "", fmt.Errorf("control plane %s: %w", spec.Key, err)
	}
	_, statErr := os.Stat(l.etcdData())
	hasData := statErr == nil
	var vs []string
	for _, c := range controlplane.Components[1:] {
		vs = append(vs, startVersion(spec, c))
	}
	chosen := chooseLayout(recorded, r.plane != "", hasData, vs)
	if chosen != recorded {
		if err := os.WriteFile(l.layoutFile(), []byte(chosen+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("recording the process layout of %s: %w", spec.Key, err)
		}
	}
	return chosen, nil
}

// clusterNameFileName is the file in a control plane's data directory
// that records the name kube-controller-manager knows it by.
const clusterNameFileName = "cluster-name"

// withClusterName returns spec with the cluster name its plane keeps:
// the one recorded in the plane's data directory, else spec's (its key's
// last element), recorded on the plane's first start. A standby plane
// adopted by a cluster keeps its own: its processes, taken over by the
// fke-manager after a restart, then run the command that one computes.
func withClusterName(spec controlplane.Spec, l layout) (controlplane.Spec, error) {
	file := filepath.Join(l.root, clusterNameFileName)
	data, err := os.ReadFile(file)
	switch {
	case err == nil && strings.TrimSpace(string(data)) != "":
		spec.ClusterName = strings.TrimSpace(string(data))
		return spec, nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return spec, fmt.Errorf("reading the cluster name of %s: %w", spec.Key, err)
	}
	if spec.ClusterName == "" {
		spec.ClusterName = filepath.Base(spec.Key)
	}
	if err := writeIfChanged(file, []byte(spec.ClusterName+"\n")); err != nil {
		return spec, fmt.Errorf("recording the cluster name of %s: %w", spec.Key, err)
	}
	return spec, nil
}

// seedDir holds, under a runtime's directory, the planes' seeds: the
// objects upstream's API server creates alike in every new cluster of a
// version, saved by the first plane of the version and written into each
// new plane's empty datastore before its API server looks for them
// (cmd/fke-kube-plane/seed.go). A dot-name: no namespace is called that.
const seedDir = ".seeds"

// seedFile is the seed of planes of version under dir.
func seedFile(dir, version string) string {
	return filepath.Join(dir, seedDir, "plane-"+version+".json")
}

// planeArgs are fke-kube-plane's arguments: the seed file, then each
// component's own flags, exactly those its separate process gets, after
// its name.
func planeArgs(l layout, spec controlplane.Spec, seed string) []string {
	args := []string{"--seed=" + seed}
	for i, c := range controlplane.Components {
		if i > 0 {
			args = append(args, "--")
		}
		args = append(append(args, c), componentArgs(c, l, spec)...)
	}
	return args
}

// allReady is a readiness check that passes when every component's does,
// checked in start order.
func allReady(ready map[string]func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		for _, c := range controlplane.Components {
			if err := ready[c](ctx); err != nil {
				return fmt.Errorf("%s: %w", c, err)
			}
		}
		return nil
	}
}

// startPlane starts the combined process of spec unless it runs; r.mu is
// held. The process waits for its API server before it starts the
// controller manager and the scheduler, as startMissing does for separate
// processes.
func (r *Runtime) startPlane(ctx context.Context, spec controlplane.Spec, l layout, ready map[string]func(context.Context) error) error {
	name := r.procName(spec.Key, controlplane.APIServer)
	if _, ok := r.procs[spec.Key][controlplane.APIServer]; !ok {
		name = processName(spec.Key, planeProcess)
	}
	if p := r.group.Get(name); p == nil || p.State() == supervisor.Stopped {
		s := supervisor.Spec{Name: name, Slot: slot(spec, controlplane.APIServer), Root: l.root, Path: r.plane, Args: planeArgs(l, spec, seedFile(r.dir, versions.Default)),
			Env: componentEnv(planeProcess), LogPath: l.log(planeProcess), Ready: allReady(ready)}
		if spec.Standby {
			s.Nice = standbyNice
		}
		if _, err := r.group.Start(ctx, s); err != nil {
			return fmt.Errorf("starting %s: %w", s.Name, err)
		}
		r.log.Info("started the control plane in one process", "cluster", spec.Key, "version", versions.Default)
	}
	for _, c := range controlplane.Components {
		r.procs[spec.Key][c] = componentProc{name: name, version: startVersion(spec, c)}
	}
	return nil
}
