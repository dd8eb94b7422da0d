package local

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/supervisor"
	"fke.dev/fke/internal/versions"
)

// TestAdoptedPlaneKeepsItsCommand: the command of an adopted standby
// plane's processes as fke-manager computes it after a restart (for the
// cluster's key and directory) differs from the one they were started
// with only in the directory their paths lie in (the supervisor.Spec
// Root): the process holder hands them over, the directory being the same
// through the link Adopt leaves. The name kube-controller-manager knows
// the cluster by is the plane's own for life; a cold cluster's is its
// name.
func TestAdoptedPlaneKeepsItsCommand(t *testing.T) {
	r := newTestRuntime(t)
	const from, to = ".standby/abc", "team/demo"
	spec := controlplane.Spec{
		Key: from, Standby: true, Version: versions.Default, PodCIDR: "10.112.0.0/14", ServiceCIDR: "10.96.0.0/16", NodeAddress: "172.29.0.1",
		Ports: controlplane.Ports{APIServer: 40001, EtcdClient: 40002, EtcdPeer: 40003, ControllerManager: 40004, Scheduler: 40005},
	}
	// Each component's command and the one-process plane's, with the
	// plane's directory written as ROOT.
	commands := func(s controlplane.Spec, l layout) []string {
		var out []string
		for _, c := range controlplane.Components {
			out = append(out, strings.Join(componentArgs(c, l, s), " "))
		}
		out = append(out, strings.Join(planeArgs(l, s, seedFile(r.dir, versions.Default)), " "))
		for i := range out {
			out[i] = strings.ReplaceAll(out[i], l.root+"/", "ROOT/")
		}
		return out
	}
	standbyLayout := newLayout(r.DataDir(from))
	if err := os.MkdirAll(standbyLayout.root, 0o700); err != nil {
		t.Fatal(err)
	}
	standby, err := withClusterName(spec, standbyLayout)
	if err != nil {
		t.Fatal(err)
	}
	started := commands(standby, standbyLayout)
	if !strings.Contains(started[2], "--cluster-name=abc ") {
		t.Fatalf("standby controller manager: %s, want --cluster-name=abc", started[2])
	}

	if err := moveDataDir(r.DataDir(from), r.DataDir(to)); err != nil {
		t.Fatal(err)
	}
	adopted := spec
	adopted.Key, adopted.Standby = to, false
	clusterLayout := newLayout(r.DataDir(to))
	if adopted, err = withClusterName(adopted, clusterLayout); err != nil {
		t.Fatal(err)
	}
	if after := commands(adopted, clusterLayout); !slices.Equal(after, started) {
		t.Errorf("after adoption and a restart the commands are\n%q\nwant those started\n%q", after, started)
	}

	cold := spec
	cold.Key, cold.Standby = "team/cold", false
	coldLayout := newLayout(r.DataDir(cold.Key))
	if err := os.MkdirAll(coldLayout.root, 0o700); err != nil {
		t.Fatal(err)
	}
	if cold, err = withClusterName(cold, coldLayout); err != nil || cold.ClusterName != "cold" {
		t.Errorf("a cold cluster's name %q (%v), want cold", cold.ClusterName, err)
	}
}

// TestForgetAliasesKeepsLinksInUse: the link Adopt leaves at a standby
// plane's old place stays while processes may open files through it: a
// process of the adopting plane started with the old paths, or a plane
// this runtime has not taken over yet (after a restart of fke-manager,
// the process holder may still run the earlier manager's processes with
// them). It goes once the adopting plane runs with its own paths, or is
// deleted.
func TestForgetAliasesKeepsLinksInUse(t *testing.T) {
	r := newTestRuntime(t)
	r.procs = map[string]map[string]componentProc{}
	adopt := func(id, key string) {
		t.Helper()
		from := ".standby/" + id
		if err := os.MkdirAll(r.DataDir(from), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := moveDataDir(r.DataDir(from), r.DataDir(key)); err != nil {
			t.Fatal(err)
		}
	}
	adopt("untaken", "team/untaken")
	adopt("own", "team/own")
	adopt("old", "team/old")
	adopt("gone", "team/gone")
	if err := os.RemoveAll(r.DataDir("team/gone")); err != nil {
		t.Fatal(err)
	}
	// team/own runs with its own paths, team/old with the standby's (a
	// process started before Adopt, or taken over with them).
	for key, root := range map[string]string{"team/own": r.DataDir("team/own"), "team/old": r.DataDir(".standby/old")} {
		name := processName(key, controlplane.Etcd)
		if _, err := r.group.Start(context.Background(), supervisor.Spec{Name: name, Root: root, Path: "sleep", Args: []string{"1000"}, GracePeriod: time.Second}); err != nil {
			t.Fatal(err)
		}
		r.running[key] = controlplane.Spec{Key: key}
		r.procs[key] = map[string]componentProc{controlplane.Etcd: {name: name}}
	}
	t.Cleanup(func() { _ = r.group.StopAll(context.Background()) })

	removed, err := r.ForgetAliases(".standby")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{".standby/gone", ".standby/own"}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	for _, id := range []string{"untaken", "old"} {
		if fi, err := os.Lstat(filepath.Join(r.dir, ".standby", id)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("link .standby/%s: %v, want kept", id, err)
		}
	}

	// Once team/old's process stopped (its restart runs with team/old's
	// paths), and team/untaken is taken over, their links go too.
	if err := r.group.Stop(context.Background(), processName("team/old", controlplane.Etcd)); err != nil {
		t.Fatal(err)
	}
	r.running["team/untaken"] = controlplane.Spec{Key: "team/untaken"}
	if removed, err = r.ForgetAliases(".standby"); err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{".standby/old", ".standby/untaken"}; !slices.Equal(removed, want) {
		t.Fatalf("then removed %v, want %v", removed, want)
	}
}
