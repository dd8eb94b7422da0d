package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const heldSpecEnv = "FKE_SUPERVISOR_TEST_HELD_SPEC"

// heldHelper runs in a re-executed test binary as a supervisor whose
// children a Holder keeps (a manager under the daemon): it starts the
// Spec in $FKE_SUPERVISOR_TEST_HELD_SPEC through the holder on the socket
// $FKE_SUPERVISOR_TEST_HELD_SPEC names, prints the child's pid once it is
// Ready, and idles until the test kills it.
func heldHelper() int {
	var req heldRequest
	if err := json.Unmarshal([]byte(os.Getenv(heldSpecEnv)), &req); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	g := NewGroup(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	g.HoldIn(NewHolderClient(req.Socket))
	p, err := g.Start(context.Background(), Spec{Name: req.Name, Slot: req.Slot, Root: req.Root, Path: req.Path, Args: req.Args, Env: req.Env, LogPath: req.LogPath, GracePeriod: time.Second})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		err = p.WaitReady(ctx)
		cancel()
	}
	return printPidAndIdle(p, err)
}

// heldRequest is what heldHelper starts (a Spec has functions).
type heldRequest struct {
	Socket, Name, Slot, Root, Path, LogPath string
	Args, Env                               []string
}

// runHeld starts a helper supervisor that has the holder on socket start
// spec, returns the child's pid and kills the helper (SIGKILL, as a crash).
func runHeld(t *testing.T, socket string, spec Spec) int {
	t.Helper()
	env, err := json.Marshal(heldRequest{Socket: socket, Name: spec.Name, Slot: spec.Slot, Root: spec.Root, Path: spec.Path, Args: spec.Args, Env: spec.Env, LogPath: spec.LogPath})
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=held", heldSpecEnv+"="+string(env))
	helper.Stderr = os.Stderr
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatalf("starting helper: %v", err)
	}
	defer func() {
		_ = helper.Process.Kill()
		_ = helper.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the helper's child pid: %v", err)
	}
	pid, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		t.Fatalf("helper printed %q: %v", line, err)
	}
	return pid
}

func startHolder(t *testing.T, window time.Duration) (*Holder, string) {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "run", "holder.sock")
	h := NewHolder(nil)
	h.AdoptWindow = window
	ln, err := ListenHolder(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stopCtx, stopCancel := context.WithTimeout(context.Background(), testTimeout)
		defer stopCancel()
		h.StopAll(stopCtx)
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	fi, err := os.Stat(socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	return h, socket
}

// A supervisor that dies leaves its held children running; the next one
// takes over a child of the same slot and command, replaces one whose
// command changed, and children no one takes over within the window stop.
func TestHolderKeepsChildrenAcrossSupervisors(t *testing.T) {
	h, socket := startHolder(t, 3*time.Second)
	sleep := func(arg string) Spec {
		return Spec{Name: "c/etcd", Slot: "127.0.0.1:2379", Path: "sleep", Args: []string{arg}, Env: []string{"LANG=C"}, GracePeriod: time.Second}
	}

	first := runHeld(t, socket, sleep("1000"))
	killOnCleanup(t, first)
	if gone(first) {
		t.Fatalf("child %d ended with its supervisor", first)
	}
	// Another name in the same slot and the same command: handed over.
	renamed := sleep("1000")
	renamed.Name = "c/etcd@v2"
	if again := runHeld(t, socket, renamed); again != first {
		t.Fatalf("second supervisor got pid %d, want the running child %d", again, first)
	}

	// The command changed: the old child stops before the new one starts.
	replaced := runHeld(t, socket, sleep("999"))
	killOnCleanup(t, replaced)
	if replaced == first {
		t.Fatal("a changed command was handed the old child")
	}
	if !gone(first) {
		t.Errorf("old child %d still runs beside its replacement", first)
	}

	// A new supervisor that never asks for the slot: after the window the
	// child no one took over stops; the new supervisor's own child stays.
	other := runHeld(t, socket, Spec{Name: "other", Path: "sleep", Args: []string{"1000"}})
	killOnCleanup(t, other)
	waitFor(t, "the unclaimed child to stop", func() bool { return gone(replaced) })
	if gone(other) {
		t.Error("the newest supervisor's child was stopped")
	}
	h.StopAll(ctxTimeout(t))
	if !gone(other) {
		t.Error("StopAll left a child running")
	}
}

// A child started with the paths of a directory that then moved, leaving
// a link at its old place (a standby plane adopted by a cluster), runs the
// command a later supervisor gives with the directory's new paths: it is
// handed over, and says which Root it was started with. Once the link is
// gone, the old paths name nothing: the child is replaced.
func TestHolderHandsOverAMovedRoot(t *testing.T) {
	_, socket := startHolder(t, time.Minute)
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "ns"), 0o700); err != nil {
		t.Fatal(err)
	}
	spec := func(root, slot string) Spec {
		path, args := sh("exec sleep 1000")
		return Spec{
			Name: root + "/etcd", Slot: slot, Root: root, Path: path, Args: append(args, "--data-dir="+root+"/etcd"),
			Env: []string{"LANG=C"}, LogPath: filepath.Join(root, "logs", "etcd.log"), GracePeriod: time.Second,
		}
	}
	move := func(from, to string, link bool) {
		t.Helper()
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
		if link {
			if err := os.Symlink(to, from); err != nil {
				t.Fatal(err)
			}
		}
	}

	standby, cluster := filepath.Join(base, ".standby", "x"), filepath.Join(base, "ns", "c")
	first := runHeld(t, socket, spec(standby, "127.0.0.1:2379"))
	killOnCleanup(t, first)
	move(standby, cluster, true)
	g := NewGroup(nil)
	g.HoldIn(NewHolderClient(socket))
	t.Cleanup(func() { _ = g.StopAll(ctxTimeout(t)) })
	checked := make(chan struct{})
	s := spec(cluster, "127.0.0.1:2379")
	s.Ready = func(ctx context.Context) error {
		select {
		case <-checked:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p, err := g.Start(ctxTimeout(t), s)
	if err != nil {
		t.Fatal(err)
	}
	if p.Pid() != first {
		t.Fatalf("the cluster's supervisor got pid %d, want the standby's child %d", p.Pid(), first)
	}
	if !p.Adopted() || !p.Adopting() || p.Root() != standby {
		t.Fatalf("taken over: Adopted %v, Adopting %v, Root %q; want true, true, %q", p.Adopted(), p.Adopting(), p.Root(), standby)
	}
	close(checked)
	if err := p.WaitReady(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	if !p.Adopted() || p.Adopting() {
		t.Errorf("taken over and checked: Adopted %v, Adopting %v; want true, false", p.Adopted(), p.Adopting())
	}

	// The link removed: the old child's paths name nothing any more.
	other, moved := filepath.Join(base, ".standby", "y"), filepath.Join(base, "ns", "d")
	second := runHeld(t, socket, spec(other, "127.0.0.1:2380"))
	killOnCleanup(t, second)
	move(other, moved, false)
	replaced := runHeld(t, socket, spec(moved, "127.0.0.1:2380"))
	killOnCleanup(t, replaced)
	if replaced == second || !gone(second) {
		t.Errorf("a child whose Root is no longer the directory was handed over (pid %d, old %d gone %v)", replaced, second, gone(second))
	}
}

// The fingerprint of a command counts paths below its Root from there,
// and only those: a sibling directory whose name begins with the Root's
// is another path.
func TestFingerprintCountsPathsFromRoot(t *testing.T) {
	cmd := func(root string, args ...string) launch {
		return launch{Path: "/bin/etcd", Root: root, Args: append([]string{"etcd"}, args...), LogPath: filepath.Join(root, "logs", "etcd.log"), Env: []string{"GOGC=50"}}
	}
	a := cmd("/d/.standby/x", "--data-dir=/d/.standby/x/etcd", "--cert=/d/.standby/x/pki/a.crt", "--dir=/d/.standby/x")
	for _, tc := range []struct {
		name string
		l    launch
		same bool
	}{
		{"the same at another root", cmd("/d/ns/c", "--data-dir=/d/ns/c/etcd", "--cert=/d/ns/c/pki/a.crt", "--dir=/d/ns/c"), true},
		{"the same root with a trailing slash", cmd("/d/.standby/x/", "--data-dir=/d/.standby/x/etcd", "--cert=/d/.standby/x/pki/a.crt", "--dir=/d/.standby/x"), true},
		{"another argument", cmd("/d/ns/c", "--data-dir=/d/ns/c/etcd2", "--cert=/d/ns/c/pki/a.crt", "--dir=/d/ns/c"), false},
		{"a path outside the root", cmd("/d/ns/c", "--data-dir=/d/ns/c2/etcd", "--cert=/d/ns/c/pki/a.crt", "--dir=/d/ns/c"), false},
		{"no root", cmd("", "--data-dir=/d/.standby/x/etcd", "--cert=/d/.standby/x/pki/a.crt", "--dir=/d/.standby/x"), false},
	} {
		if got := fingerprint(tc.l) == fingerprint(a); got != tc.same {
			t.Errorf("%s: same fingerprint %v, want %v", tc.name, got, tc.same)
		}
	}
	// Without a Root every path counts as written.
	if fingerprint(cmd("", "--data-dir=/d/x")) == fingerprint(cmd("", "--data-dir=/d/y")) {
		t.Error("two commands without a Root and with other paths have the same fingerprint")
	}
}

// A new supervisor stops, by directory, the children an earlier one left
// and it will not take over (a cluster deleted right after a manager's
// restart): those logging into the directory, through a link too, and
// none of its own or of another directory.
func TestStopLeftIn(t *testing.T) {
	_, socket := startHolder(t, time.Minute)
	base := t.TempDir()
	a, b := filepath.Join(base, "ns", "a"), filepath.Join(base, "ns", "b")
	for _, d := range []string{a, b, filepath.Join(base, "ns", "ab"), filepath.Join(base, ".standby")} {
		if err := os.MkdirAll(filepath.Join(d, "logs"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// A standby plane adopted by b: its old place is a link to b.
	if err := os.Symlink(b, filepath.Join(base, ".standby", "x")); err != nil {
		t.Fatal(err)
	}
	held := func(name, logDir string) int {
		pid := runHeld(t, socket, Spec{Name: name, Slot: name, Path: "sleep", Args: []string{"1000"}, LogPath: filepath.Join(logDir, "logs", "c.log")})
		killOnCleanup(t, pid)
		return pid
	}
	inA := held("ns/a/etcd", a)
	inB := held("ns/b/etcd", b)
	viaLink := held(".standby/x/plane", filepath.Join(base, ".standby", "x"))
	beside := held("ns/ab/etcd", filepath.Join(base, "ns", "ab"))

	g := NewGroup(nil)
	g.HoldIn(NewHolderClient(socket))
	own, err := g.Start(ctxTimeout(t), Spec{Name: "ns/b/new", Path: "sleep", Args: []string{"1000"}, LogPath: filepath.Join(b, "logs", "new.log"), GracePeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.StopAll(ctxTimeout(t)) })

	if err := g.StopLeftIn(ctxTimeout(t), b); err != nil {
		t.Fatal(err)
	}
	for what, pid := range map[string]int{"left in b": inB, "left in b through a link": viaLink} {
		if !gone(pid) {
			t.Errorf("the child %s (%d) still runs", what, pid)
		}
	}
	for what, pid := range map[string]int{"left in a": inA, "left in ab": beside, "the group's own in b": own.Pid()} {
		if gone(pid) {
			t.Errorf("the child %s (%d) was stopped", what, pid)
		}
	}
	if err := g.StopLeftIn(ctxTimeout(t), a); err != nil {
		t.Fatal(err)
	}
	if !gone(inA) || gone(beside) {
		t.Errorf("after stopping what was left in a: a's child gone %v (want true), ab's gone %v (want false)", gone(inA), gone(beside))
	}
}

// A Group whose children a Holder keeps supervises them as its own: a
// child that exits is started again, Stop ends it, and the holder reaps it.
func TestHeldGroupRestartsAndStops(t *testing.T) {
	h, socket := startHolder(t, time.Minute)
	g, logs := newTestGroup(t)
	g.HoldIn(NewHolderClient(socket))
	marker := filepath.Join(t.TempDir(), "runs")
	path, args := sh(`echo run >> ` + marker + `; [ $(wc -l < ` + marker + `) -ge 2 ] && exec sleep 1000; exit 3`)
	p, err := g.Start(ctxTimeout(t), Spec{Name: "flaky", Path: path, Args: args, MinBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a restart", func() bool { return p.Restarts() == 1 && p.State() == Ready })
	pid := p.Pid()
	killOnCleanup(t, pid)
	if ppid := parentOf(t, pid); ppid != os.Getpid() {
		t.Fatalf("held child's parent is %d, want the holder %d", ppid, os.Getpid())
	}
	if n := len(logs.entries(t, "process exited unexpectedly")); n != 1 {
		t.Errorf("%d exits logged, want 1", n)
	}
	if err := g.Stop(ctxTimeout(t), "flaky"); err != nil {
		t.Fatal(err)
	}
	if !gone(pid) {
		t.Errorf("child %d still runs after Stop", pid)
	}
	waitFor(t, "the holder to reap the child", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.held) == 0
	})
}

func parentOf(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var ppid int
	for line := range strings.Lines(string(data)) {
		if _, err := fmt.Sscanf(line, "PPid:\t%d", &ppid); err == nil {
			return ppid
		}
	}
	t.Fatalf("no PPid in /proc/%d/status", pid)
	return 0
}

// A start request must say who asks and what to run.
func TestHolderRefusesIncompleteRequests(t *testing.T) {
	h := NewHolder(nil)
	if _, err := h.start(context.Background(), "", launch{Name: "x", Path: "/bin/true", Args: []string{"true"}}); err == nil {
		t.Error("a request without a session was accepted")
	}
	if _, err := h.start(context.Background(), "s", launch{Name: "x"}); err == nil {
		t.Error("a request without a command was accepted")
	}
}
