// Package testenv runs fke as a user does, for integration and e2e tests:
// it builds the fke binary, runs `fke up` in a temporary data directory and
// drives the CLI. The upstream binaries come from `make binaries`.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/managementplane"
	"fke.dev/fke/internal/manager"
)

// RepoRoot returns the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BinDir returns the directory of the upstream binaries, or skips the test
// when they are not built (and fails it under CI, where they must be).
func BinDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(binaries.EnvDir)
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "_output", "bin")
	}
	_, err := binaries.Finder{Dir: dir}.Paths(binaries.Etcd, binaries.KubeAPIServer, binaries.KubeControllerManager, binaries.KubeScheduler)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("upstream binaries missing under CI: %v", err)
		}
		t.Skipf("upstream binaries not built (run `make binaries`): %v", err)
	}
	return dir
}

func init() {
	// controller-runtime's client logs through its global logger.
	ctrllog.SetLogger(logr.Discard())
}

// BuildTags are the build tags fke's binaries need (see the Makefile's
// BUILD_TAGS).
const BuildTags = "kustomize_disable_go_plugin_support"

var (
	buildOnce sync.Once
	fkeBin    string
	buildErr  error
)

// Main runs a package's tests and then removes what testenv built for them.
// Use it from TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if fkeBin != "" {
		os.RemoveAll(filepath.Dir(fkeBin))
	}
	os.Exit(code)
}

// FkeBinary builds cmd/fke (with fke-pause, fke-demo-server, fke-gpu-metrics
// and fke-vpa beside it) once per test process and returns its path.
func FkeBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fke-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		fkeBin = filepath.Join(dir, "fke")
		// The pause and demo-server binaries go beside fke, where `fke up`
		// finds them to build the images it pushes to its registry, and so
		// do the GPU metrics adapter and the VPA, which the manager runs
		// beside each tenant control plane.
		cmd := exec.Command("go", "build", "-tags", BuildTags, "-o", dir+"/", "./cmd/fke", "./cmd/fke-pause", "./cmd/fke-demo-server",
			"./cmd/fke-gpu-metrics", "./cmd/fke-vpa")
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building fke: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return fkeBin
}

// Env is one local management plane started for a test.
type Env struct {
	T       testing.TB
	DataDir string
	BinDir  string
	Fke     string
}

// Up builds fke, runs `fke up` in a fresh data directory and registers
// `fke down --purge` as cleanup. flags are added to `fke up`; without
// --warm-pool the pool is off, so that each test's clusters start as its
// own code says (a test of the pool turns it on).
func Up(t testing.TB, flags ...string) *Env {
	t.Helper()
	e := New(t)
	e.Up(flags...)
	return e
}

// Up runs `fke up` for e (see the function Up), with e's fke and binary
// directory: a test may point them elsewhere (a release's) first.
func (e *Env) Up(flags ...string) {
	t := e.T
	t.Helper()
	args := []string{"up"}
	if !slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, "--warm-pool") }) {
		args = append(args, "--warm-pool=0")
	}
	e.MustRun(append(args, flags...)...)
	t.Cleanup(func() {
		out, err := e.Run("down", "--purge")
		if err != nil {
			t.Errorf("fke down: %v\n%s", err, out)
		}
	})
}

// New prepares an Env without starting anything.
func New(t testing.TB) *Env {
	t.Helper()
	bin := BinDir(t)
	dir, err := os.MkdirTemp("", "fke-test-")
	if err != nil {
		t.Fatal(err)
	}
	// Runs after Up's `fke down` (cleanups run last-registered first).
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &Env{T: t, DataDir: dir, BinDir: bin, Fke: FkeBinary(t)}
}

// Run runs fke with args against this Env and returns its combined output.
func (e *Env) Run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.Fke, append([]string{"--data-dir", e.DataDir, "--bin-dir", e.BinDir}, args...)...)
	// Only the flags choose the data and binary directories.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, binaries.EnvDir+"=") && !strings.HasPrefix(kv, managementplane.EnvHome+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// For returns a copy of e that reports its failures to t: a subtest's
// (a subtest that fails through its parent's T panics instead).
func (e *Env) For(t testing.TB) *Env {
	c := *e
	c.T = t
	return &c
}

// MustRun runs fke and fails the test on error.
func (e *Env) MustRun(args ...string) string {
	e.T.Helper()
	out, err := e.Run(args...)
	if err != nil {
		e.T.Fatalf("fke %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// RunFail runs fke expecting an error and returns its output.
func (e *Env) RunFail(args ...string) string {
	e.T.Helper()
	out, err := e.Run(args...)
	if err == nil {
		e.T.Fatalf("fke %s succeeded, want an error\n%s", strings.Join(args, " "), out)
	}
	return out
}

// ManagementConfig returns the management API's rest config.
func (e *Env) ManagementConfig() *rest.Config {
	e.T.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", managementplane.Paths{Dir: e.DataDir}.Kubeconfig())
	if err != nil {
		e.T.Fatal(err)
	}
	return cfg
}

// Client returns a client of the management API.
func (e *Env) Client() client.Client {
	e.T.Helper()
	scheme, err := manager.Scheme()
	if err != nil {
		e.T.Fatal(err)
	}
	c, err := client.New(e.ManagementConfig(), client.Options{Scheme: scheme})
	if err != nil {
		e.T.Fatal(err)
	}
	return c
}

// TenantConfig returns the admin rest config of cluster name (from `fke kubeconfig`).
func (e *Env) TenantConfig(name string) *rest.Config {
	e.T.Helper()
	kc := e.MustRun("kubeconfig", name)
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kc))
	if err != nil {
		e.T.Fatalf("kubeconfig of %s: %v", name, err)
	}
	cfg.Timeout = 10 * time.Second
	return cfg
}

// Tenant returns a clientset for cluster name.
func (e *Env) Tenant(name string) kubernetes.Interface {
	e.T.Helper()
	cs, err := kubernetes.NewForConfig(e.TenantConfig(name))
	if err != nil {
		e.T.Fatal(err)
	}
	return cs
}

// State returns the daemon's state.
func (e *Env) State() managementplane.State {
	e.T.Helper()
	st, err := managementplane.ReadState(e.DataDir)
	if err != nil {
		e.T.Fatal(err)
	}
	return st
}

// Eventually polls cond every interval until it returns nil or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = cond(); last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s: %v", what, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
