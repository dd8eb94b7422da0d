package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/test/testenv"
)

// BenchmarkDensity creates many idle tenants on this machine (30, or
// FKE_BENCH_TENANTS) at once, with their default addons, and reports the
// time until all are Ready and the memory each costs: summed over its
// processes, as RSS (pages shared with other tenants' processes counted in
// full), as PSS (shared pages split among the processes that map them,
// what a dense machine pays) and as anonymous memory (private heap and
// stacks), for the control plane and its addons apart; and the machine's
// MemAvailable drop per tenant. With FKE_KWOKCTL (a kwokctl binary:
// `cd hack/k8s/kwok && go build -o /tmp/kwokctl sigs.k8s.io/kwok/cmd/kwokctl`)
// it then makes as many kwokctl clusters beside them and reports theirs.
// FKE_BENCH_ADDONS=off creates the tenants without addons (a kwokctl
// cluster has none: like for like, the API servers then serve no
// aggregated APIs either).
//
//	go test ./bench -run '^$' -bench Density -benchtime 1x -timeout 30m
func BenchmarkDensity(b *testing.B) {
	n := 30
	if v, err := strconv.Atoi(os.Getenv("FKE_BENCH_TENANTS")); err == nil && v > 0 {
		n = v
	}
	e := testenv.Up(b)
	c := e.Client()
	before := memAvailableMB(b)
	start := time.Now()
	var noAddons []string
	switch v := os.Getenv("FKE_BENCH_ADDONS"); v {
	case "", "on":
	case "off":
		noAddons = []string{"--metrics-server=false", "--gpu-metrics=false"}
	default:
		b.Fatalf("FKE_BENCH_ADDONS=%s: want on or off", v)
	}
	for i := range n {
		e.MustRun(append([]string{"cluster", "create", fmt.Sprintf("d%02d", i)}, noAddons...)...)
	}
	testenv.Eventually(b, 20*time.Minute, "every tenant Ready", func() error {
		var list fkev1.ClusterList
		if err := c.List(context.Background(), &list); err != nil {
			return err
		}
		ready := 0
		for _, cl := range list.Items {
			if meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionReady) {
				ready++
			}
		}
		if ready < n {
			return fmt.Errorf("%d of %d Ready", ready, n)
		}
		return nil
	})
	allReady := time.Since(start)
	time.Sleep(60 * time.Second) // a settling period for idle memory, not a wait for state
	after := memAvailableMB(b)

	var cp, addons []tenantMem
	for i := range n {
		t, a := tenantMemory(b, e.DataDir, fmt.Sprintf("d%02d", i))
		cp, addons = append(cp, t), append(addons, a)
	}
	mean := func(ms []tenantMem, f func(tenantMem) float64) float64 {
		s := 0.0
		for _, m := range ms {
			s += f(m)
		}
		return s / float64(len(ms))
	}
	rss, pss, anon := func(m tenantMem) float64 { return m.rss }, func(m tenantMem) float64 { return m.pss }, func(m tenantMem) float64 { return m.anon }
	b.ReportMetric(allReady.Seconds(), "s-all-ready")
	b.ReportMetric(mean(cp, rss), "MB-rss-cp-per-tenant")
	b.ReportMetric(mean(cp, pss), "MB-pss-cp-per-tenant")
	b.ReportMetric(mean(cp, anon), "MB-anon-cp-per-tenant")
	b.ReportMetric(mean(addons, pss), "MB-pss-addons-per-tenant")
	b.ReportMetric((before-after)/float64(n), "MB-available-drop-per-tenant")
	b.Logf("%d tenants created at once, all Ready after %s", n, allReady.Round(100*time.Millisecond))
	b.Logf("per tenant, control plane: RSS %.0f, PSS %.0f, anonymous %.0f MB; addons: RSS %.0f, PSS %.0f, anonymous %.0f MB",
		mean(cp, rss), mean(cp, pss), mean(cp, anon), mean(addons, rss), mean(addons, pss), mean(addons, anon))
	b.Logf("MemAvailable %.0f -> %.0f MB: %.0f MB per tenant (everything: control plane, addons, the manager's share)", before, after, (before-after)/float64(n))
	// The engine's own processes beside the tenants.
	for _, role := range []string{"daemon", "manager"} {
		for _, p := range testenv.FindProcs("fke "+role+" ", "--data-dir "+e.DataDir+" ") {
			b.Logf("fke %s (pid %d): RSS %.0f, anonymous %.0f MB", role, p.PID, rssMB(p.PID), procKB(p.PID, "smaps_rollup", "Anonymous:")/1024)
		}
	}
	if kwokctl := os.Getenv("FKE_KWOKCTL"); kwokctl != "" {
		kwokctlDensity(b, kwokctl, e.BinDir, n)
	}
}

// kwokctlDensity makes n kwokctl clusters (binary runtime, the same
// upstream binaries) beside fke's tenants and reports the same figures for
// them. kwokctl is given every binary it runs, and a proxy on a closed
// loopback port, so that it never downloads anything.
func kwokctlDensity(b *testing.B, kwokctl, binDir string, n int) {
	home, run := kwokctlRunner(b, kwokctl)
	before := memAvailableMB(b)
	start := time.Now()
	for i := range n {
		name := fmt.Sprintf("k%02d", i)
		b.Cleanup(func() { run("delete", "cluster", "--name", name) })
		run(append(kwokctlCreateArgs(name, binDir), "--wait", "10m")...)
	}
	allReady := time.Since(start)
	time.Sleep(60 * time.Second) // a settling period for idle memory, not a wait for state
	after := memAvailableMB(b)
	var sum tenantMem
	for i := range n {
		dir := fmt.Sprintf("%s/clusters/k%02d/", home, i)
		procs := testenv.FindProcs(dir)
		if len(procs) != 5 {
			b.Fatalf("kwokctl cluster k%02d: want 5 processes, found %d", i, len(procs))
		}
		for _, p := range procs {
			sum = tenantMem{sum.rss + rssMB(p.PID), sum.pss + procKB(p.PID, "smaps_rollup", "Pss:")/1024, sum.anon + procKB(p.PID, "smaps_rollup", "Anonymous:")/1024}
		}
	}
	per := float64(n)
	b.ReportMetric(allReady.Seconds(), "s-kwokctl-all-ready")
	b.ReportMetric(sum.pss/per, "MB-pss-kwokctl-per-cluster")
	b.ReportMetric(sum.anon/per, "MB-anon-kwokctl-per-cluster")
	b.Logf("kwokctl: %d clusters created one after the other in %s", n, allReady.Round(100*time.Millisecond))
	b.Logf("kwokctl per cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok): RSS %.0f, PSS %.0f, anonymous %.0f MB", sum.rss/per, sum.pss/per, sum.anon/per)
	b.Logf("kwokctl: MemAvailable %.0f -> %.0f MB: %.0f MB per cluster", before, after, (before-after)/per)
}

// kwokctlRunner returns a kwokctl work directory of b's and a function
// that runs kwokctl there, failing b when it fails. kwokctl gets a proxy
// on a closed loopback port, so that it never downloads anything.
func kwokctlRunner(b *testing.B, kwokctl string) (home string, run func(args ...string)) {
	home = b.TempDir()
	env := append(os.Environ(), "KWOK_WORKDIR="+home, "HTTPS_PROXY=http://127.0.0.1:1", "HTTP_PROXY=http://127.0.0.1:1")
	return home, func(args ...string) {
		cmd := exec.Command(kwokctl, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("kwokctl %v: %v\n%s", args, err, out)
		}
	}
}

// kwokctlCreateArgs are the kwokctl arguments that create cluster name
// with the binary runtime, every binary it runs taken from binDir.
func kwokctlCreateArgs(name, binDir string) []string {
	return []string{"create", "cluster", "--name", name, "--runtime", "binary",
		"--etcd-binary", binDir + "/etcd", "--kube-apiserver-binary", binDir + "/kube-apiserver",
		"--kube-controller-manager-binary", binDir + "/kube-controller-manager", "--kube-scheduler-binary", binDir + "/kube-scheduler",
		"--kwok-controller-binary", binDir + "/kwok"}
}

// tenantMem is memory summed over processes, in MB.
type tenantMem struct{ rss, pss, anon float64 }

// tenantMemory sums the memory of a tenant's control-plane processes and,
// apart, of its addon processes (those whose arguments name its addons
// directory).
func tenantMemory(b *testing.B, dataDir, name string) (cp, addons tenantMem) {
	b.Helper()
	dir := dataDir + "/clusters/default/" + name + "/"
	procs := 0
	for _, p := range testenv.FindProcs(dir) {
		m := tenantMem{rss: rssMB(p.PID), pss: procKB(p.PID, "smaps_rollup", "Pss:") / 1024, anon: procKB(p.PID, "smaps_rollup", "Anonymous:") / 1024}
		if slices.ContainsFunc(p.Args, func(a string) bool { return strings.Contains(a, dir+"addons/") }) {
			addons = tenantMem{addons.rss + m.rss, addons.pss + m.pss, addons.anon + m.anon}
			continue
		}
		procs++
		cp = tenantMem{cp.rss + m.rss, cp.pss + m.pss, cp.anon + m.anon}
	}
	if want := testenv.PlaneProcs(b, dir); procs != want {
		b.Fatalf("tenant %s: want %d control-plane processes, found %d", name, want, procs)
	}
	return cp, addons
}

// memAvailableMB reads the machine's MemAvailable.
func memAvailableMB(b *testing.B) float64 {
	b.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v / 1024
		}
	}
	b.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}
