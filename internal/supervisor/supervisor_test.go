package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const helperEnv = "FKE_SUPERVISOR_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "pdeathsig":
		os.Exit(pdeathsigHelper())
	case "held":
		os.Exit(heldHelper())
	}
	os.Exit(m.Run())
}

// pdeathsigHelper runs in a re-executed test binary: it supervises one
// `sleep 1000`, prints its pid and idles until the test kills it.
func pdeathsigHelper() int {
	g := NewGroup(nil)
	p, err := g.Start(context.Background(), Spec{Name: "sleep", Path: "sleep", Args: []string{"1000"}})
	return printPidAndIdle(p, err)
}

// printPidAndIdle ends a helper: it prints p's pid and idles until the test
// kills it, or prints err and returns 1.
func printPidAndIdle(p *Process, err error) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(p.Pid())
	for { // idle until killed
		time.Sleep(time.Hour)
	}
}

// testTimeout bounds every wait; generous because the race detector on a
// loaded 2-core machine is slow.
const testTimeout = 20 * time.Second

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gone reports whether pid no longer runs. A zombie counts as gone: an
// orphan is reparented to PID 1, which may not reap it in a container.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// Format: pid (comm) state ...
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

func killOnCleanup(t *testing.T, pid int) {
	t.Cleanup(func() {
		if pid > 0 && !gone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // best effort: test already failed
		}
	})
}

func fileExists(path string) func(context.Context) error {
	return func(context.Context) error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return fmt.Errorf("%s is empty", path)
		}
		return nil
	}
}

func sh(script string) (string, []string) { return "/bin/sh", []string{"-c", script} }

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// logBuffer collects JSON logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// entries returns the log entries with message msg.
func (b *logBuffer) entries(t *testing.T, msg string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("bad log line %q: %v", line, err)
		}
		if e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}

func newTestGroup(t *testing.T) (*Group, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	g := NewGroup(slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := g.StopAll(ctx); err != nil {
			t.Errorf("StopAll: %v", err)
		}
	})
	return g, logs
}

func TestStartBecomesReady(t *testing.T) {
	g, _ := newTestGroup(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "logs", "nested", "child.log")
	path, args := sh(`echo "hello from $GREETING"; echo "to stderr" >&2; exec sleep 1000`)
	p, err := g.Start(ctxTimeout(t), Spec{
		Name:    "greeter",
		Path:    path,
		Args:    args,
		Env:     []string{"GREETING=fke", "PATH=" + os.Getenv("PATH")},
		LogPath: logPath,
		Ready: func(context.Context) error {
			data, err := os.ReadFile(logPath)
			if err != nil {
				return err
			}
			if !strings.Contains(string(data), "to stderr") {
				return errors.New("not yet")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	killOnCleanup(t, p.Pid())
	if p.Pid() == 0 {
		t.Error("Pid() = 0 right after Start")
	}
	if err := p.WaitReady(ctxTimeout(t)); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	if p.State() != Ready || p.Restarts() != 0 {
		t.Errorf("state %s, restarts %d", p.State(), p.Restarts())
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "hello from fke") {
		t.Errorf("log file = %q", data)
	}
	if g.Get("greeter") != p || g.Get("nope") != nil {
		t.Error("Get returned the wrong process")
	}
}

func TestRestartWithBackoffAndReadiness(t *testing.T) {
	g, logs := newTestGroup(t)
	readyFile := filepath.Join(t.TempDir(), "ready")
	p, err := g.Start(ctxTimeout(t), Spec{
		Name:       "sleeper",
		Path:       "sleep",
		Args:       []string{"1000"},
		Ready:      fileExists(readyFile),
		MinBackoff: 100 * time.Millisecond,
		MaxBackoff: time.Second,
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if p.State() != Starting {
		t.Errorf("state before the ready file exists = %s, want Starting", p.State())
	}
	if err := os.WriteFile(readyFile, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctxTimeout(t)); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}

	for i, wantBackoff := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		if err := os.Remove(readyFile); err != nil {
			t.Fatal(err)
		}
		old := p.Pid()
		killed := time.Now()
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatalf("killing child: %v", err)
		}
		waitFor(t, "restart", func() bool { return p.Restarts() == i+1 })
		if elapsed := time.Since(killed); elapsed < wantBackoff {
			t.Errorf("restarted after %v, before the %v backoff", elapsed, wantBackoff)
		}
		pid := p.Pid()
		killOnCleanup(t, pid)
		if pid == 0 || pid == old {
			t.Errorf("pid after restart = %d (was %d)", pid, old)
		}
		// Readiness is checked again: the ready file is gone.
		if s := p.State(); s != Starting {
			t.Errorf("state after restart = %s, want Starting", s)
		}
		if err := os.WriteFile(readyFile, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := p.WaitReady(ctxTimeout(t)); err != nil {
			t.Fatalf("WaitReady after restart: %v", err)
		}
		exits := logs.entries(t, "process exited unexpectedly")
		if len(exits) != i+1 {
			t.Fatalf("%d exit logs, want %d", len(exits), i+1)
		}
		e := exits[i]
		if got := time.Duration(e["backoff"].(float64)); got != wantBackoff {
			t.Errorf("logged backoff %v, want %v", got, wantBackoff)
		}
		if e["name"] != "sleeper" || e["pid"] != float64(old) || e["signal"] != "killed" || e["restarts"] != float64(i) {
			t.Errorf("exit log = %v", e)
		}
	}
}

func TestStopDoesNotRestart(t *testing.T) {
	g, logs := newTestGroup(t)
	p, err := g.Start(ctxTimeout(t), Spec{Name: "sleeper", Path: "sleep", Args: []string{"1000"}, MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	pid := p.Pid()
	killOnCleanup(t, pid)
	if err := p.WaitReady(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(ctxTimeout(t), "sleeper"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !gone(pid) {
		t.Errorf("pid %d still runs after Stop", pid)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) = %v, want ESRCH", pid, err)
	}
	if p.State() != Stopped || p.Pid() != 0 || p.Restarts() != 0 {
		t.Errorf("after Stop: state %s, pid %d, restarts %d", p.State(), p.Pid(), p.Restarts())
	}
	if err := p.WaitReady(ctxTimeout(t)); err == nil {
		t.Error("WaitReady on a stopped process succeeded")
	}
	if n := len(logs.entries(t, "process exited unexpectedly")); n != 0 {
		t.Errorf("%d unexpected-exit logs", n)
	}
	// Stop is idempotent, also for unknown names.
	if err := g.Stop(ctxTimeout(t), "sleeper"); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := g.Stop(ctxTimeout(t), "unknown"); err != nil {
		t.Errorf("Stop of unknown: %v", err)
	}
	// The name can be started again.
	p2, err := g.Start(ctxTimeout(t), Spec{Name: "sleeper", Path: "sleep", Args: []string{"1000"}})
	if err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	killOnCleanup(t, p2.Pid())
	if g.Get("sleeper") != p2 {
		t.Error("Get does not return the new process")
	}
}

func TestStopDuringBackoff(t *testing.T) {
	g, _ := newTestGroup(t)
	path, args := sh("exit 3")
	p, err := g.Start(ctxTimeout(t), Spec{Name: "crasher", Path: path, Args: args, MinBackoff: time.Hour})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitFor(t, "backoff", func() bool { return p.State() == Backoff })
	start := time.Now()
	if err := g.Stop(ctxTimeout(t), "crasher"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Stop during backoff took %v", elapsed)
	}
	if p.State() != Stopped || p.Restarts() != 0 {
		t.Errorf("state %s, restarts %d", p.State(), p.Restarts())
	}
}

func TestMaxRestartsFails(t *testing.T) {
	g, logs := newTestGroup(t)
	path, args := sh("exit 3")
	p, err := g.Start(ctxTimeout(t), Spec{Name: "crasher", Path: path, Args: args,
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, MaxRestarts: 2})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitFor(t, "Failed", func() bool { return p.State() == Failed })
	if p.Restarts() != 2 {
		t.Errorf("restarts = %d, want 2", p.Restarts())
	}
	if err := p.WaitReady(ctxTimeout(t)); err == nil {
		t.Error("WaitReady on a failed process succeeded")
	}
	exits := logs.entries(t, "process exited unexpectedly")
	if len(exits) != 3 || exits[0]["exit_code"] != float64(3) {
		t.Errorf("exit logs = %v", exits)
	}
	if err := g.Stop(ctxTimeout(t), "crasher"); err != nil {
		t.Errorf("Stop of a failed process: %v", err)
	}
	// A failed process's name can be started again.
	if _, err := g.Start(ctxTimeout(t), Spec{Name: "crasher", Path: "sleep", Args: []string{"1000"}}); err != nil {
		t.Errorf("Start after Failed: %v", err)
	}
}

func TestStopKillsProcessGroup(t *testing.T) {
	tests := []struct {
		name   string
		script string
		grace  time.Duration
	}{
		{"grandchild exits on SIGTERM", `sleep 1000 & echo $! > "$PIDFILE"; wait`, 0},
		{"SIGTERM ignored, SIGKILL after grace", `trap '' TERM; sleep 1000 & echo $! > "$PIDFILE"; wait`, 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, logs := newTestGroup(t)
			pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
			path, args := sh(tt.script)
			p, err := g.Start(ctxTimeout(t), Spec{
				Name:        "parent",
				Path:        path,
				Args:        args,
				Env:         []string{"PIDFILE=" + pidFile, "PATH=" + os.Getenv("PATH")},
				Ready:       fileExists(pidFile),
				GracePeriod: tt.grace,
			})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			pid := p.Pid()
			killOnCleanup(t, pid)
			if err := p.WaitReady(ctxTimeout(t)); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			grandchild, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatalf("grandchild pid %q: %v", data, err)
			}
			killOnCleanup(t, grandchild)
			if gone(grandchild) {
				t.Fatal("grandchild not running before Stop")
			}
			if err := g.Stop(ctxTimeout(t), "parent"); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if !gone(pid) {
				t.Errorf("child %d still runs after Stop", pid)
			}
			waitFor(t, "grandchild to be gone", func() bool { return gone(grandchild) })
			killed := len(logs.entries(t, "process ignored SIGTERM, killing")) > 0
			if killed != (tt.grace > 0) {
				t.Errorf("escalated to SIGKILL = %v", killed)
			}
		})
	}
}

func TestStopGraceFitsContextDeadline(t *testing.T) {
	g, _ := newTestGroup(t)
	path, args := sh(`trap '' TERM; touch "$READY"; sleep 1000`)
	ready := filepath.Join(t.TempDir(), "ready")
	p, err := g.Start(ctxTimeout(t), Spec{Name: "stubborn", Path: path, Args: args,
		Env: []string{"READY=" + ready, "PATH=" + os.Getenv("PATH")}, Ready: func(context.Context) error {
			_, err := os.Stat(ready)
			return err
		}, GracePeriod: time.Hour})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	killOnCleanup(t, p.Pid())
	if err := p.WaitReady(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if err := g.Stop(ctx, "stubborn"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Stop took %v, beyond the context deadline", elapsed)
	}
}

func TestStopAllReverseOrder(t *testing.T) {
	g, _ := newTestGroup(t)
	dir := t.TempDir()
	order := filepath.Join(dir, "order")
	names := []string{"etcd", "apiserver", "scheduler"}
	for _, name := range names {
		ready := filepath.Join(dir, name+".ready")
		path, args := sh(`trap 'echo $NAME >> "$ORDER"; exit 0' TERM; touch "$READY"; sleep 1000 & wait`)
		p, err := g.Start(ctxTimeout(t), Spec{
			Name:  name,
			Path:  path,
			Args:  args,
			Env:   []string{"NAME=" + name, "ORDER=" + order, "READY=" + ready, "PATH=" + os.Getenv("PATH")},
			Ready: func(context.Context) error { _, err := os.Stat(ready); return err },
		})
		if err != nil {
			t.Fatalf("Start %s: %v", name, err)
		}
		killOnCleanup(t, p.Pid())
		if err := p.WaitReady(ctxTimeout(t)); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.StopAll(ctxTimeout(t)); err != nil {
		t.Fatalf("StopAll: %v", err)
	}
	data, err := os.ReadFile(order)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(string(data)), []string{"scheduler", "apiserver", "etcd"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("stop order %v, want %v", got, want)
	}
	for _, name := range names {
		if s := g.Get(name).State(); s != Stopped {
			t.Errorf("%s: state %s", name, s)
		}
	}
}

func TestStartErrors(t *testing.T) {
	g, _ := newTestGroup(t)
	p, err := g.Start(ctxTimeout(t), Spec{Name: "dup", Path: "sleep", Args: []string{"1000"}})
	if err != nil {
		t.Fatal(err)
	}
	killOnCleanup(t, p.Pid())
	plainFile := filepath.Join(t.TempDir(), "not-a-binary")
	if err := os.WriteFile(plainFile, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		spec    Spec
		wantErr string
	}{
		{"missing absolute binary", Spec{Name: "a", Path: "/nonexistent/fke-no-such-binary"}, "binary /nonexistent/fke-no-such-binary not found"},
		{"missing binary in PATH", Spec{Name: "b", Path: "fke-no-such-binary"}, "binary fke-no-such-binary not found"},
		{"missing relative to Dir", Spec{Name: "c", Path: "./bin/etcd", Dir: t.TempDir()}, "binary ./bin/etcd not found"},
		{"not executable", Spec{Name: "d", Path: plainFile}, "binary " + plainFile + " not found"},
		{"duplicate name", Spec{Name: "dup", Path: "sleep", Args: []string{"1"}}, "process dup already running"},
		{"empty name", Spec{Path: "sleep"}, "empty name"},
		{"empty path", Spec{Name: "e"}, "empty path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := g.Start(ctxTimeout(t), tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
			}
			if p != nil {
				t.Error("returned a process with the error")
			}
		})
	}
	if g.Get("dup") != p || g.Get("a") != nil {
		t.Error("a failed Start changed the group")
	}
}

// TestPdeathsig: when the supervising process dies, its children die too.
func TestPdeathsig(t *testing.T) {
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=pdeathsig")
	helper.Stderr = os.Stderr
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatalf("starting helper: %v", err)
	}
	t.Cleanup(func() {
		if helper.ProcessState == nil {
			_ = helper.Process.Kill() // best effort: the test failed before killing it
			_ = helper.Wait()
		}
	})
	lines := make(chan string, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			line = "error: " + err.Error()
		}
		lines <- line
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(testTimeout):
		t.Fatal("timed out waiting for the helper's child pid")
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper printed %q: %v", line, err)
	}
	killOnCleanup(t, child)
	if gone(child) {
		t.Fatal("child not running while the helper lives")
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("killing helper: %v", err)
	}
	if err := helper.Wait(); err == nil {
		t.Error("helper exited cleanly, want killed")
	}
	waitFor(t, "the dead supervisor's child to be gone", func() bool { return gone(child) })
}

// TestChildSurvivesStarterThreadExit: Pdeathsig follows the forking thread,
// so a child must not die when the goroutine that called Start ends with its
// thread.
func TestChildSurvivesStarterThreadExit(t *testing.T) {
	g, _ := newTestGroup(t)
	started := make(chan *Process, 1)
	errs := make(chan error, 1)
	go func() {
		// Never unlocked: the runtime ends this thread when the goroutine
		// returns.
		runtime.LockOSThread()
		p, err := g.Start(context.Background(), Spec{Name: "sleeper", Path: "sleep", Args: []string{"1000"}})
		if err != nil {
			errs <- err
			return
		}
		started <- p
	}()
	var p *Process
	select {
	case p = <-started:
	case err := <-errs:
		t.Fatalf("Start: %v", err)
	}
	pid := p.Pid()
	killOnCleanup(t, pid)
	// Watch for a while: a child killed by its starter thread's exit would
	// be gone within milliseconds and restarted.
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if gone(pid) || p.Restarts() != 0 {
			t.Fatalf("child died after its starter thread exited (restarts %d)", p.Restarts())
		}
	}
}

// TestBeforeRestart: the hook runs before each restart, not before the
// first start, and a failing hook does not prevent the restart.
func TestBeforeRestart(t *testing.T) {
	g, logs := newTestGroup(t)
	var mu sync.Mutex
	calls := 0
	p, err := g.Start(ctxTimeout(t), Spec{
		Name: "sleeper", Path: "sleep", Args: []string{"1000"},
		MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		BeforeRestart: func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("BeforeRestart got a context without deadline")
			}
			mu.Lock()
			defer mu.Unlock()
			calls++
			return errors.New("no luck")
		},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	mu.Lock()
	if calls != 0 {
		t.Errorf("BeforeRestart ran %d times before the first start", calls)
	}
	mu.Unlock()
	old := p.Pid()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "restart", func() bool { return p.Restarts() == 1 })
	killOnCleanup(t, p.Pid())
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("BeforeRestart ran %d times, want 1", calls)
	}
	if n := len(logs.entries(t, "preparing restart failed, restarting anyway")); n != 1 {
		t.Errorf("%d logs of the failed hook, want 1", n)
	}
}

// niceOf reads the niceness of every thread of pid from /proc (field 19 of
// each task's stat).
func niceOf(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue
		}
		// The command name (field 2) may hold spaces; count from its ')'.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		n, err := strconv.Atoi(fields[16]) // field 19 overall
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// TestNice: a child starts at Spec.Nice on every thread, SetNice moves it
// back, and this process's own threads keep niceness 0.
func TestNice(t *testing.T) {
	if !canRenice {
		t.Skip("Spec.Nice applies only to a privileged supervisor")
	}
	g := NewGroup(nil)
	t.Cleanup(func() { _ = g.StopAll(context.Background()) })
	p, err := g.Start(context.Background(), Spec{Name: "nice", Path: "sleep", Args: []string{"1000"}, Nice: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range niceOf(t, p.Pid()) {
		if n != 10 {
			t.Fatalf("child niceness %d, want 10", n)
		}
	}
	other, err := g.Start(context.Background(), Spec{Name: "plain", Path: "sleep", Args: []string{"1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := niceOf(t, other.Pid()); got[0] != 0 {
		t.Fatalf("a child started after a niced one has niceness %d, want 0", got[0])
	}
	if err := p.SetNice(0); err != nil {
		t.Fatal(err)
	}
	for _, n := range niceOf(t, p.Pid()) {
		if n != 0 {
			t.Fatalf("after SetNice(0): niceness %d", n)
		}
	}
}

func TestWaitReadyTimeoutSaysWhyNotReady(t *testing.T) {
	g, _ := newTestGroup(t)
	path, args := sh(`exec sleep 1000`)
	notServing := errors.New("no CRI on this socket")
	checked := make(chan struct{}, 1)
	p, err := g.Start(ctxTimeout(t), Spec{
		Name: "never-ready", Path: path, Args: args,
		Ready: func(context.Context) error {
			select {
			case checked <- struct{}{}:
			default:
			}
			return notServing
		},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	killOnCleanup(t, p.Pid())
	<-checked // the probe has failed once
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	err = p.WaitReady(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, notServing) {
		t.Fatalf("WaitReady: %v, want the deadline and the last check's error", err)
	}
}
