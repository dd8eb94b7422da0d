package local_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/controlplane/local"
	"fke.dev/fke/internal/supervisor"
	"fke.dev/fke/internal/versions"
	"fke.dev/fke/test/testenv"
)

// niceness reads the niceness of a process's main thread from /proc.
func niceness(t *testing.T, pid int) int {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	n, err := strconv.Atoi(fields[16])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAdoptStandbyPlane: a standby plane runs at low CPU priority; a
// cluster adopts it without a restart (same processes, same data, now at
// normal priority, its data under the cluster's directory); the cluster's
// next start runs from that directory, and the links left behind go. The
// same holds for a plane in one process.
func TestAdoptStandbyPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane")
	}
	t.Run("one process per component", func(t *testing.T) { testAdoptStandbyPlane(t, false) })
	t.Run("one process", func(t *testing.T) { testAdoptStandbyPlane(t, true) })
}

func testAdoptStandbyPlane(t *testing.T, oneProcess bool) {
	const from, to = ".standby/abc", "team/adopted"
	rt, spec, cfg := startPlaneAs(t, testenv.BinDir(t), from, versions.Default, "", true, oneProcess)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "made-on-standby"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, c := range mustStatus(t, rt, from).Components {
		pids[c.Name] = c.PID
		if os.Geteuid() == 0 {
			if n := niceness(t, c.PID); n != 10 {
				t.Fatalf("standby %s runs at niceness %d, want 10", c.Name, n)
			}
		}
	}

	if err := rt.Adopt(ctx, from, to); err != nil {
		t.Fatal(err)
	}
	if err := rt.Adopt(ctx, from, to); err != nil {
		t.Fatalf("second Adopt: %v", err)
	}
	if st := mustStatus(t, rt, from); len(st.Components) != 0 {
		t.Fatalf("the standby key still reports components: %+v", st)
	}
	st := mustStatus(t, rt, to)
	if !st.Ready() {
		t.Fatalf("adopted plane not ready: %+v", st)
	}
	for _, c := range st.Components {
		if c.PID != pids[c.Name] {
			t.Fatalf("%s restarted by the adoption: pid %d, was %d", c.Name, c.PID, pids[c.Name])
		}
		if n := niceness(t, c.PID); n != 0 {
			t.Fatalf("adopted %s runs at niceness %d, want 0", c.Name, n)
		}
	}
	if fi, err := os.Lstat(rt.DataDir(to)); err != nil || !fi.IsDir() {
		t.Fatalf("the cluster's data directory is not a directory: %v", err)
	}
	// The API and etcd keep writing through their old paths.
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "made-after-adoption"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A standby Ensure of the old key must not start a second copy.
	if _, err := rt.Ensure(ctx, spec); err == nil {
		t.Fatal("Ensure of the adopted standby key succeeded")
	}
	if removed, err := rt.ForgetAliases(".standby"); err != nil || len(removed) != 0 {
		t.Fatalf("ForgetAliases removed %v (%v) while the processes still use the link", removed, err)
	}

	// Restarted as the cluster: from its own directory, with its data.
	if err := rt.Stop(ctx, to); err != nil {
		t.Fatal(err)
	}
	spec.Key, spec.Standby = to, false
	if _, err := rt.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := rt.WaitReady(wctx, to); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"made-on-standby", "made-after-adoption"} {
		if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("after the restart as %s: %v", to, err)
		}
	}
	if n := len(testenv.FindProcs(rt.DataDir(from) + "/")); n != 0 {
		t.Fatalf("%d processes still run with the standby paths", n)
	}
	if removed, err := rt.ForgetAliases(".standby"); err != nil || len(removed) != 1 {
		t.Fatalf("ForgetAliases removed %v (%v), want the one link", removed, err)
	}
	if keys, err := rt.Keys(".standby"); err != nil || len(keys) != 0 {
		t.Fatalf("standby keys left: %v (%v)", keys, err)
	}
	want := len(controlplane.Components)
	if oneProcess {
		want = 1
	}
	if n := len(testenv.FindProcs(rt.DataDir(to) + "/")); n != want {
		t.Fatalf("%d processes run with the cluster's paths, want %d", n, want)
	}
}

// TestAdoptedPlaneRunsOnThroughARestart: a standby plane adopted by a
// cluster, whose processes a process holder keeps, runs on when the
// runtime that adopted it is replaced by another (fke-manager restarted):
// the new runtime takes every process over, none restarted (they run with
// the standby plane's paths, the cluster's through the link Adopt left),
// reports them as being taken over until checked, and keeps the link
// they use.
func TestAdoptedPlaneRunsOnThroughARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane")
	}
	t.Run("one process per component", func(t *testing.T) { testAdoptedPlaneRunsOn(t, false) })
	t.Run("one process", func(t *testing.T) { testAdoptedPlaneRunsOn(t, true) })
}

func testAdoptedPlaneRunsOn(t *testing.T, oneProcess bool) {
	const from, to = ".standby/abc", "team/adopted"
	bin, dir := testenv.BinDir(t), t.TempDir()
	socket := filepath.Join(t.TempDir(), "holder.sock")
	h := supervisor.NewHolder(nil)
	ln, err := supervisor.ListenHolder(socket)
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stopServing := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.Serve(serveCtx, ln) }()
	var runtimes []*local.Runtime
	t.Cleanup(func() {
		// The holder first: the runtimes' restarts of what it stops fail.
		stopServing()
		if err := <-served; err != nil {
			t.Errorf("holder: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		h.StopAll(ctx)
		for _, rt := range runtimes {
			_ = rt.StopAll(ctx)
		}
	})
	newRuntime := func() *local.Runtime {
		t.Helper()
		rt, err := local.New(dir, binaries.Finder{Dir: bin}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if oneProcess {
			if err := rt.OneProcessPlanes(); err != nil {
				t.Fatal(err)
			}
		}
		rt.HoldProcessesIn(supervisor.NewHolderClient(socket))
		runtimes = append(runtimes, rt)
		return rt
	}

	ctx := context.Background()
	first := newRuntime()
	spec, cfg := ensurePlane(t, first, from, versions.Default, "", true)
	pids := map[string]int{}
	for _, c := range mustStatus(t, first, from).Components {
		pids[c.Name] = c.PID
	}
	if err := first.Adopt(ctx, from, to); err != nil {
		t.Fatal(err)
	}
	spec.Key, spec.Standby = to, false

	// fke-manager restarts.
	second := newRuntime()
	if removed, err := second.ForgetAliases(".standby"); err != nil || len(removed) != 0 {
		t.Fatalf("before taking the plane over, ForgetAliases removed %v (%v)", removed, err)
	}
	st, err := second.Ensure(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Adopting() && !st.Ready() {
		t.Errorf("just taken over: %+v, want every component ready or being taken over", st.Components)
	}
	for _, c := range st.Components {
		if c.PID != pids[c.Name] || !c.Adopted {
			t.Errorf("%s: pid %d (adopted %v), want %d taken over", c.Name, c.PID, c.Adopted, pids[c.Name])
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := second.WaitReady(wctx, to); err != nil {
		t.Fatal(err)
	}
	for _, c := range mustStatus(t, second, to).Components {
		if c.PID != pids[c.Name] || !c.Ready || c.Adopting {
			t.Errorf("%s after the check: pid %d, ready %v, adopting %v; want %d ready", c.Name, c.PID, c.Ready, c.Adopting, pids[c.Name])
		}
	}
	if removed, err := second.ForgetAliases(".standby"); err != nil || len(removed) != 0 {
		t.Fatalf("ForgetAliases removed %v (%v) while the processes taken over use the link", removed, err)
	}
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-the-restart"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
