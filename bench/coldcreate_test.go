package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"fke.dev/fke/test/testenv"
)

// BenchmarkColdCreate measures a cold create as issue 18 counts it: from
// the start of `fke cluster create` (no warm pool, no addons) to the
// tenant's /readyz answering ok, on an otherwise quiet machine: each
// cluster is deleted before the next is made. It runs FKE_BENCH_CREATES
// (5) creates for each plane layout, one after the other in the same run:
// one process per tenant (fke up's default) and one process per component
// (--one-process-planes=false). With FKE_KWOKCTL (a kwokctl binary, see
// BenchmarkDensity) it then times as many kwokctl clusters on the same
// upstream binaries, created and deleted the same way: `kwokctl create
// cluster` → its API server's /readyz.
//
//	FKE_KWOKCTL=/tmp/kwokctl go test ./bench -run '^$' -bench ColdCreate -benchtime 1x -v
func BenchmarkColdCreate(b *testing.B) {
	n := 5
	if v, err := strconv.Atoi(os.Getenv("FKE_BENCH_CREATES")); err == nil && v > 0 {
		n = v
	}
	report := func(what, unit string, ds []time.Duration) {
		med, max := medianMax(ds)
		b.ReportMetric(med.Seconds(), "s-median-"+unit)
		b.ReportMetric(max.Seconds(), "s-max-"+unit)
		b.Logf("%s: create → /readyz median %.2f s, max %.2f s; all: %s", what, med.Seconds(), max.Seconds(), secs(ds))
	}
	for _, layout := range []struct{ name, unit, flag string }{
		{"one process per tenant", "one-process", "--one-process-planes=true"},
		{"one process per component", "separate", "--one-process-planes=false"},
	} {
		e := testenv.Up(b, layout.flag)
		var ds []time.Duration
		for i := range n {
			name := fmt.Sprintf("cold-%d", i)
			start := time.Now()
			e.MustRun("cluster", "create", name, "--gpu-metrics=false", "--metrics-server=false")
			waitReadyz(b, e.Client(), name)
			ds = append(ds, time.Since(start))
			e.MustRun("cluster", "delete", name, "--wait")
		}
		e.MustRun("down", "--purge")
		report(layout.name, layout.unit, ds)
	}
	if kwokctl := os.Getenv("FKE_KWOKCTL"); kwokctl != "" {
		report("kwokctl", "kwokctl", kwokctlCreates(b, kwokctl, testenv.BinDir(b), n))
	}
}

// kwokctlCreates times n kwokctl clusters (see kwokctlRunner), each from
// `kwokctl create cluster` to its API server's /readyz, and deleted
// before the next.
func kwokctlCreates(b *testing.B, kwokctl, binDir string, n int) []time.Duration {
	home, run := kwokctlRunner(b, kwokctl)
	var ds []time.Duration
	for i := range n {
		name := fmt.Sprintf("cold-%d", i)
		start := time.Now()
		run(kwokctlCreateArgs(name, binDir)...)
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(home, "clusters", name, "kubeconfig.yaml"))
		if err != nil {
			b.Fatal(err)
		}
		cfg.Timeout = time.Second
		cs := kubernetes.NewForConfigOrDie(cfg)
		testenv.Eventually(b, time.Minute, "kwokctl cluster "+name+" /readyz", func() error {
			body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
			if err == nil && string(body) != "ok" {
				err = fmt.Errorf("/readyz: %s", body)
			}
			return err
		})
		ds = append(ds, time.Since(start))
		run("delete", "cluster", "--name", name)
	}
	return ds
}
