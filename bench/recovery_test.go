package bench

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/test/testenv"
)

// recoveryRuns is how many times each crash and each floor is measured.
const recoveryRuns = 5

// BenchmarkRecovery measures, five times each, the time from SIGKILL of a
// process until what it serves answers again, and beside it the floor: the
// same binary started by hand on the same data, time until it serves.
//
//	go test ./bench -run '^$' -bench Recovery -benchtime 1x -v
//
// What "serves" means per crash (the tenant cluster has a kwok pool of 3):
//   - fke-manager: the manager's own /readyz (the tenant control plane
//     serves on: the daemon holds its processes; the benchmark fails when
//     the tenant API goes unanswered for more than a second meanwhile).
//     Floor: `fke manager` started by hand against the management plane
//     (itself started by hand, untimed), until its /readyz.
//   - daemon: from `fke up` (the user's command after the crash) until the
//     tenant /readyz. Floor: `fke up` after a clean `fke down`.
//   - tenant kube-apiserver: its /readyz. Floor: the same command line by
//     hand with its etcd running.
//   - tenant etcd and management etcd: etcd's /readyz. Floor: the same
//     command line by hand.
func BenchmarkRecovery(b *testing.B) {
	e := testenv.Up(b)
	e.MustRun("cluster", "create", "rec", "--wait", "--nodepool", "name=gpu,type=gpu-h100x8,replicas=3")
	e.MustRun("nodepool", "scale", "rec/gpu", "--replicas", "3", "--wait")
	r := &recovery{b: b, e: e, tenant: e.TenantConfig("rec")}
	for i := 0; i < b.N; i++ {
		r.crashes()
	}
	r.floors()
	r.report()
}

type recovery struct {
	b      *testing.B
	e      *testenv.Env
	tenant *rest.Config
	crash  map[string][]time.Duration
	floor  map[string][]time.Duration
	// running holds, by pid, the output file of each process started by
	// hand that runs.
	running map[int]string
}

const (
	caseManager        = "fke-manager"
	caseDaemon         = "daemon"
	caseTenantAPI      = "tenant kube-apiserver"
	caseTenantEtcd     = "tenant etcd"
	caseManagementEtcd = "management etcd"
)

var recoveryCases = []string{caseManager, caseDaemon, caseTenantAPI, caseTenantEtcd, caseManagementEtcd}

func (r *recovery) tenantReady() error { return testenv.Readyz(r.tenant) }

func (r *recovery) etcdReady(name string, port int) func() error {
	tlsCfg := r.e.EtcdTLS(name, pki.APIServerEtcdClient)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	return func() error {
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
}

func (r *recovery) tenantEtcdPort() int { return int(r.e.Cluster("rec").Status.Ports.EtcdClient) }

// one finds the single process whose command line has every needle.
func (r *recovery) one(needles ...string) testenv.Proc {
	ps := testenv.FindProcs(needles...)
	if len(ps) != 1 {
		r.b.Fatalf("want one process with %v, found %v", needles, ps)
	}
	return ps[0]
}

func (r *recovery) tenantAPIProc() testenv.Proc {
	return r.one("kube-apiserver", "--secure-port="+strconv.Itoa(int(r.e.Cluster("rec").Status.Ports.APIServer)))
}

func (r *recovery) tenantEtcdProc() testenv.Proc {
	return r.one("--data-dir=" + filepath.Join(r.e.ClusterDir("rec"), "etcd"))
}

// componentPID waits until the daemon's state names the running process
// of component (it records a restarted one's pid a moment after it starts).
func (r *recovery) componentPID(component string) int {
	var pid int
	until(r.b, 30*time.Second, component+" pid recorded", func() error {
		if pid = r.e.ComponentPID(component); pid <= 0 || !testenv.Alive(pid) {
			return fmt.Errorf("pid %d", pid)
		}
		return nil
	})
	return pid
}

// settle waits until everything serves before the next kill.
func (r *recovery) settle() {
	until(r.b, 2*time.Minute, "all serving", func() error {
		if err := r.tenantReady(); err != nil {
			return err
		}
		if err := r.e.ManagerReadyz(); err != nil {
			return err
		}
		return testenv.Readyz(r.e.ManagementConfig())
	})
}

func (r *recovery) crashes() {
	r.crash = map[string][]time.Duration{}
	mgmtEtcd := r.etcdReady("", r.e.ManagementPorts().EtcdClient)
	for _, c := range recoveryCases {
		for range recoveryRuns {
			r.settle()
			var d time.Duration
			switch c {
			case caseManager:
				probe, err := testenv.ProbeAPI(r.tenant, "/api/v1/namespaces/default", 100*time.Millisecond)
				if err != nil {
					r.b.Fatal(err)
				}
				d = sinceReady(r.b, testenv.KillPID(r.b, r.componentPID("fke-manager")), r.e.ManagerReadyz)
				if gap, summary := probe.Stop(); gap > time.Second {
					r.b.Fatalf("the tenant API went unanswered while the manager was down: %s", summary)
				}
			case caseDaemon:
				testenv.KillPID(r.b, r.e.State().PID)
				until(r.b, time.Minute, "processes gone", func() error {
					if left := testenv.FindProcs(r.e.DataDir); len(left) > 0 {
						return fmt.Errorf("%d left", len(left))
					}
					return nil
				})
				start := time.Now()
				r.e.MustRun("up", "--warm-pool=0")
				d = sinceReady(r.b, start, r.tenantReady)
			case caseTenantAPI:
				d = sinceReady(r.b, testenv.KillPID(r.b, r.tenantAPIProc().PID), r.tenantReady)
			case caseTenantEtcd:
				d = sinceReady(r.b, testenv.KillPID(r.b, r.tenantEtcdProc().PID), r.etcdReady("rec", r.tenantEtcdPort()))
			case caseManagementEtcd:
				d = sinceReady(r.b, testenv.KillPID(r.b, r.componentPID("etcd")), mgmtEtcd)
			}
			r.crash[c] = append(r.crash[c], d)
			r.b.Logf("%s: recovered in %.2fs", c, d.Seconds())
		}
	}
	r.settle()
}

// floors stops fke and starts the same binaries by hand on the same data.
func (r *recovery) floors() {
	r.floor = map[string][]time.Duration{}
	tenantEtcd, tenantAPI := r.tenantEtcdProc().Args, r.tenantAPIProc().Args
	mgmtEtcd := r.one("etcd", "--data-dir="+filepath.Join(r.e.DataDir, "etcd")).Args
	mgmtAPI := r.one("kube-apiserver", "--secure-port="+strconv.Itoa(r.e.ManagementPorts().APIServer)).Args
	// By hand, with no daemon to hold the tenant processes: the manager
	// runs them itself.
	manager := withoutFlag(r.one(r.e.DataDir, "manager", "--health-addr").Args, "--process-holder")
	tenantEtcdReady := r.etcdReady("rec", r.tenantEtcdPort())
	mgmtEtcdReady := r.etcdReady("", r.e.ManagementPorts().EtcdClient)
	mgmtAPIReady := func() error { return testenv.Readyz(r.e.ManagementConfig()) }

	// daemon: `fke up` after a clean `fke down`.
	for range recoveryRuns {
		r.e.MustRun("down")
		start := time.Now()
		r.e.MustRun("up", "--warm-pool=0")
		r.floor[caseDaemon] = append(r.floor[caseDaemon], sinceReady(r.b, start, r.tenantReady))
	}
	r.e.MustRun("down")
	r.noneLeft()

	r.floor[caseTenantEtcd] = r.byHand(tenantEtcd, tenantEtcdReady)
	r.floor[caseManagementEtcd] = r.byHand(mgmtEtcd, mgmtEtcdReady)
	etcd := r.start(tenantEtcd)
	until(r.b, time.Minute, "tenant etcd", tenantEtcdReady)
	r.floor[caseTenantAPI] = r.byHand(tenantAPI, r.tenantReady)
	r.stop(etcd)

	// fke-manager: against the management plane started by hand (untimed).
	me, ma := r.start(mgmtEtcd), r.start(mgmtAPI)
	until(r.b, time.Minute, "management API", mgmtAPIReady)
	r.floor[caseManager] = r.byHand(manager, r.e.ManagerReadyz)
	r.stop(ma)
	r.stop(me)
	// Leave the plane running for testenv's `fke down --purge`.
	r.e.MustRun("up", "--warm-pool=0")
}

// withoutFlag returns args without the flag name and its value.
func withoutFlag(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == name:
			i++ // and its value
		case strings.HasPrefix(args[i], name+"="):
		default:
			out = append(out, args[i])
		}
	}
	return out
}

// byHand starts args recoveryRuns times, each time measuring until ready.
func (r *recovery) byHand(args []string, ready func() error) []time.Duration {
	var out []time.Duration
	for range recoveryRuns {
		start := time.Now()
		cmd := r.start(args)
		out = append(out, sinceReady(r.b, start, func() error {
			err := ready()
			if err != nil && !testenv.Alive(cmd.Process.Pid) {
				output, _ := os.ReadFile(r.running[cmd.Process.Pid])
				r.b.Fatalf("%s exited before it served (%v); its output:\n%s", args[0], err, lastLines(string(output), 30))
			}
			return err
		}))
		r.stop(cmd)
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (r *recovery) start(args []string) *exec.Cmd {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), binaries.EnvDir+"="+r.e.BinDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := os.CreateTemp(r.b.TempDir(), "output-*")
	if err != nil {
		r.b.Fatal(err)
	}
	defer out.Close() // the child holds its own descriptor
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		r.b.Fatalf("starting %s: %v", args[0], err)
	}
	if r.running == nil {
		r.running = map[int]string{}
	}
	r.running[cmd.Process.Pid] = out.Name()
	return cmd
}

// stop kills the process group of cmd and waits until no process of the
// benchmark's data directory runs but the others started by hand (the
// tenant processes of a manager started by hand die with it, by Pdeathsig;
// any left are this benchmark's and are killed too).
func (r *recovery) stop(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the group may be gone already
	_ = cmd.Wait()                                      // killed: the exit status says so
	delete(r.running, cmd.Process.Pid)
	r.noneLeft()
}

// noneLeft waits until no process of the data directory runs but those
// started by hand, killing those still there after 10 s.
func (r *recovery) noneLeft() {
	deadline := time.Now().Add(10 * time.Second)
	until(r.b, time.Minute, "processes gone", func() error {
		left := slices.DeleteFunc(testenv.FindProcs(r.e.DataDir), func(p testenv.Proc) bool { _, ok := r.running[p.PID]; return ok })
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				r.b.Logf("killing leftover %d: %s", p.PID, strings.Join(p.Args, " "))
				_ = syscall.Kill(p.PID, syscall.SIGKILL) // it may have exited meanwhile
			}
		}
		return fmt.Errorf("%d left: %v", len(left), left)
	})
}

func (r *recovery) report() {
	var lines []string
	for _, c := range recoveryCases {
		cm, cx := medianMax(r.crash[c])
		fm, fx := medianMax(r.floor[c])
		r.b.ReportMetric(cm.Seconds(), "s-median-"+strings.ReplaceAll(c, " ", "-"))
		lines = append(lines, fmt.Sprintf("| %s | %.2f s | %.2f s | %.2f s | %.2f s | %s | %s |", c,
			cm.Seconds(), cx.Seconds(), fm.Seconds(), fx.Seconds(), secs(r.crash[c]), secs(r.floor[c])))
	}
	r.b.Logf("\n| Crash | median | max | floor median | floor max | all | floor all |\n|---|---|---|---|---|---|---|\n%s", strings.Join(lines, "\n"))
}

func medianMax(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

func secs(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%.2f", d.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// sinceReady polls ready every 20 ms and returns the time from start until
// it first succeeded.
func sinceReady(b *testing.B, start time.Time, ready func() error) time.Duration {
	b.Helper()
	until(b, 2*time.Minute, "ready", ready)
	return time.Since(start)
}

// until polls cond every 20 ms until it returns nil and returns how long it
// took; it fails the benchmark after timeout.
func until(b *testing.B, timeout time.Duration, what string, cond func() error) time.Duration {
	b.Helper()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			b.Fatalf("%s: not true after %s: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
