package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/controlplane/hosted"
	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/manager"
	localnodes "fke.dev/fke/internal/nodeprovider/local"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/test/testenv"
)

// BenchmarkHosted: an fke cluster with three local nodes is the
// management cluster of the hosted runtime. One tenant control plane is
// created alone (create -> /readyz), then 10 (FKE_BENCH_HOSTED) at once,
// half with a dedicated etcd and half in the shared etcd (the runtime lets
// hosted.DefaultMaxStarting start at a time, the others queue); it reports the
// time until all answer /readyz and each tenant's memory (the working set
// of its pods, as the kubelets' summary API reports it, which is what
// `kubectl top` shows), per datastore, the shared etcd split among its
// tenants, and the idle CPU of each (FKE_BENCH_HOSTED_MAX_STARTING sets the
// start bound). Last, a snapshot of one tenant of each datastore is taken,
// the tenants are deleted, and each snapshot is restored onto the other
// datastore.
//
//	go test ./bench -run '^$' -bench Hosted -benchtime 1x -timeout 70m
func BenchmarkHosted(b *testing.B) {
	checks := localnodes.Checks(b.Context(), binaries.Finder{Dir: testenv.BinDir(b)}, hostnet.New(nil, nil))
	if err := localnodes.Unavailable(checks); err != nil {
		b.Skipf("local nodes cannot run here: %v", err)
	}
	n := 10
	if v, err := strconv.Atoi(os.Getenv("FKE_BENCH_HOSTED")); err == nil && v > 1 {
		n = v
	}
	e := testenv.Up(b)
	e.MustRun("cluster", "create", "mgmt", "--wait", "--metrics-server=false", "--gpu-metrics=false")
	e.WaitSystemImages()
	e.MustRun("nodepool", "create", "mgmt/cpu", "--provider", "local", "--instance-type", "cpu-small", "--replicas", "3")
	cs := e.Tenant("mgmt")
	testenv.WaitReadyNodes(b, cs, 3)
	out := e.MustRun("image", "push-control-plane")
	m := regexp.MustCompile(`--hosted-registry=(\S+)`).FindStringSubmatch(out)
	if m == nil {
		b.Fatalf("push-control-plane printed no registry:\n%s", out)
	}
	scheme, err := manager.Scheme()
	if err != nil {
		b.Fatal(err)
	}
	// At fke-manager's rate (client-go's default of 5 requests a second
	// would make ten planes at once wait on the client, not on the cluster).
	mcfg := e.TenantConfig("mgmt")
	mcfg.QPS, mcfg.Burst = 200, 400
	mgmt, err := client.New(mcfg, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	maxStarting := hosted.DefaultMaxStarting
	if v, err := strconv.Atoi(os.Getenv("FKE_BENCH_HOSTED_MAX_STARTING")); err == nil && v != 0 {
		maxStarting = v
	}
	rt, err := hosted.New(hosted.Options{Client: mgmt, Registry: m[1], MaxStarting: maxStarting})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.Context(), 50*time.Minute)
	defer cancel()

	// One alone: the images are on the nodes after it.
	first, err := testenv.CreateHostedPlane(ctx, rt, "bench/alone", hosted.Dedicated)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("one hosted control plane alone (dedicated etcd, first pull of the images): create -> /readyz %s", first.Ready.Round(10*time.Millisecond))
	if err := rt.Delete(ctx, first.Key); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	second, err := testenv.CreateHostedPlane(ctx, rt, "bench/alone-again", hosted.Dedicated)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(second.Ready.Seconds(), "s-create-to-readyz-alone")
	traceHostedPods(b, cs, hosted.Namespace(second.Key), t0, second.Ready)
	if err := rt.Delete(ctx, second.Key); err != nil {
		b.Fatal(err)
	}

	start := time.Now()
	var mu sync.Mutex
	var planes []*testenv.HostedPlane
	var wg sync.WaitGroup
	for i := range n {
		ds := hosted.Dedicated
		if i%2 == 1 {
			ds = hosted.Shared
		}
		wg.Go(func() {
			p, err := testenv.CreateHostedPlane(ctx, rt, fmt.Sprintf("bench/h%02d", i), ds)
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			planes = append(planes, p)
			mu.Unlock()
		})
	}
	stop := make(chan struct{})
	go logHostedProgress(ctx, b, mgmt, start, stop)
	wg.Wait()
	close(stop)
	if b.Failed() {
		b.FailNow()
	}
	all := time.Since(start)
	var ready []time.Duration
	for _, p := range planes {
		ready = append(ready, p.Ready)
	}
	b.Logf("%d hosted control planes created at once (at most %d start at a time, the others queued): all answer /readyz after %s",
		n, maxStarting, all.Round(100*time.Millisecond))
	b.ReportMetric(all.Seconds(), "s-all-ready")
	b.ReportMetric(median(ready).Seconds(), "s-median-create-to-readyz")
	b.ReportMetric(slices.Max(ready).Seconds(), "s-max-create-to-readyz")

	time.Sleep(30 * time.Second) // a settling period for idle usage, not a wait for state
	use := idleUsage(b, cs, 4, 15*time.Second)
	var ded, sh, dedCPU, shCPU []float64
	for _, p := range planes {
		u := use[hosted.Namespace(p.Key)]
		if p.Datastore == hosted.Shared {
			sh, shCPU = append(sh, u.MemMB), append(shCPU, u.CPUMilli)
		} else {
			ded, dedCPU = append(ded, u.MemMB), append(dedCPU, u.CPUMilli)
		}
	}
	sys := use[manager.DefaultSystemNamespace]
	sharedEtcd := sys.MemMB / float64(len(sh))
	meanDed, meanSh := mean(ded), mean(sh)+sharedEtcd
	b.ReportMetric(meanDed, "MB-per-tenant-dedicated")
	b.ReportMetric(meanSh, "MB-per-tenant-shared")
	b.ReportMetric(meanSh/meanDed, "shared/dedicated")
	b.Logf("memory per tenant (pods' working set): dedicated %.0f MB; shared %.0f MB (its pods %.0f + shared etcd %.0f / %d tenants); shared/dedicated %.2f",
		meanDed, meanSh, mean(sh), sys.MemMB, len(sh), meanSh/meanDed)
	cpuDed, cpuSh := mean(dedCPU), mean(shCPU)+sys.CPUMilli/float64(len(sh))
	b.ReportMetric(cpuDed, "mCPU-idle-per-tenant-dedicated")
	b.ReportMetric(cpuSh, "mCPU-idle-per-tenant-shared")
	b.Logf("idle CPU per tenant (millicores, mean of the samples): dedicated %.0f; shared %.0f (its pods %.0f + shared etcd %.0f / %d tenants); every pod of the management cluster %.0f",
		cpuDed, cpuSh, mean(shCPU), sys.CPUMilli, len(sh), use[""].CPUMilli)
	one := planes[0]
	byContainer := use[hosted.Namespace(one.Key)].Containers
	for _, c := range slices.Sorted(maps.Keys(byContainer)) {
		b.Logf("  %s (%s) %-24s %5.0f MB %4.0f mCPU", one.Key, one.Datastore, c, byContainer[c].MemMB, byContainer[c].CPUMilli)
	}
	dir := backup.Dir(b.TempDir())
	snaps := benchHostedSnapshots(ctx, b, rt, planes, dir)
	for _, p := range planes {
		if err := rt.Delete(ctx, p.Key); err != nil {
			b.Error(err)
		}
	}
	benchHostedRestores(ctx, b, rt, snaps, dir)
}

// logHostedProgress logs, every minute until stop, how many tenants' API
// servers serve (a replica available), how many replicas are available in
// all and how often they have restarted, and the management cluster's CPU
// pressure: how a start of many planes at once goes.
func logHostedProgress(ctx context.Context, b *testing.B, mgmt client.Client, start time.Time, stop <-chan struct{}) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var ds appsv1.DeploymentList
		var pods corev1.PodList
		sel := client.MatchingLabels{hosted.LabelComponent: controlplane.APIServer}
		if err := mgmt.List(ctx, &ds, sel); err != nil {
			b.Logf("progress: %v", err)
			continue
		}
		if err := mgmt.List(ctx, &pods, sel); err != nil {
			b.Logf("progress: %v", err)
			continue
		}
		serving, available, restarts := 0, int32(0), int32(0)
		for _, d := range ds.Items {
			if d.Status.AvailableReplicas > 0 {
				serving++
			}
			available += d.Status.AvailableReplicas
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.ContainerStatuses {
				restarts += c.RestartCount
			}
		}
		pressure, _ := os.ReadFile("/proc/pressure/cpu")
		first, _, _ := strings.Cut(string(pressure), "\n")
		b.Logf("progress at %s: %d of %d planes serving, %d API server replicas available, %d restarts; CPU pressure: %s",
			time.Since(start).Round(time.Second), serving, len(ds.Items), available, restarts, first)
	}
}

// hostedSnapshot is a snapshot of a running tenant, to be restored onto
// the other datastore.
type hostedSnapshot struct {
	src  *testenv.HostedPlane
	snap backup.Snapshot
}

// otherDatastore is the datastore a snapshot of a tenant on ds restores onto.
func otherDatastore(ds string) string {
	if ds == hosted.Shared {
		return hosted.Dedicated
	}
	return hosted.Shared
}

// benchHostedSnapshots takes a snapshot (a key export through the
// management cluster) of one tenant of each datastore among the running
// tenants: the snapshot time.
func benchHostedSnapshots(ctx context.Context, b *testing.B, rt *hosted.Runtime, planes []*testenv.HostedPlane, dir backup.Dir) []hostedSnapshot {
	var out []hostedSnapshot
	for _, ds := range []string{hosted.Dedicated, hosted.Shared} {
		i := slices.IndexFunc(planes, func(p *testenv.HostedPlane) bool { return p.Datastore == ds })
		if i < 0 {
			continue
		}
		src := planes[i]
		t0 := time.Now()
		snap, err := rt.Snapshot(ctx, controlplane.Spec{Key: src.Key, PKI: src.Bundle, Datastore: ds}, dir, t0.Add(time.Duration(i)*time.Second), "uid-"+ds)
		if err != nil {
			b.Error(err)
			continue
		}
		b.Logf("snapshot of %s (%s etcd): %d bytes at revision %d in %s", src.Key, ds, snap.Size, snap.Revision, time.Since(t0).Round(time.Millisecond))
		out = append(out, hostedSnapshot{src: src, snap: snap})
	}
	return out
}

// benchHostedRestores restores each snapshot into a new plane on the other
// datastore, all at once, once the tenants they came from are gone (ten
// tenants at rest fill two cores; two more planes beside them did not
// start in 20 minutes): create -> /readyz of each restored plane.
func benchHostedRestores(ctx context.Context, b *testing.B, rt *hosted.Runtime, snaps []hostedSnapshot, dir backup.Dir) {
	var wg sync.WaitGroup
	for _, s := range snaps {
		wg.Go(func() {
			to := otherDatastore(s.src.Datastore)
			p, err := testenv.RestoreHostedPlane(ctx, rt, "bench/restored-"+s.src.Datastore, to, s.src.Bundle, dir.File(s.snap.Name))
			if err != nil {
				b.Error(err)
				return
			}
			b.Logf("restored %s into a plane on the %s datastore: create -> /readyz %s", s.src.Key, to, p.Ready.Round(10*time.Millisecond))
			if err := rt.Delete(ctx, p.Key); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
}

// traceHostedPods logs where a hosted plane's create went: for each pod of
// namespace ns, when it was scheduled, when its container started and when
// it became Ready, from t0 (the first call to the runtime); ready is when
// the endpoint answered /readyz.
func traceHostedPods(b *testing.B, cs kubernetes.Interface, ns string, t0 time.Time, ready time.Duration) {
	pods, err := cs.CoreV1().Pods(ns).List(b.Context(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	since := func(t metav1.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Sub(t0).Round(100 * time.Millisecond).String()
	}
	type row struct {
		name               string
		created, scheduled metav1.Time
		started, ready     metav1.Time
	}
	var rows []row
	for _, p := range pods.Items {
		r := row{name: p.Name, created: p.CreationTimestamp}
		for _, c := range p.Status.Conditions {
			switch c.Type {
			case corev1.PodScheduled:
				r.scheduled = c.LastTransitionTime
			case corev1.PodReady:
				if c.Status == corev1.ConditionTrue {
					r.ready = c.LastTransitionTime
				}
			}
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil {
				r.started = c.State.Running.StartedAt
			}
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, c row) int { return a.ready.Compare(c.ready.Time) })
	b.Logf("trace of %s (t = 0 at the first call to the runtime; times are the API server's, to the second):", ns)
	for _, r := range rows {
		b.Logf("  %-40s created %6s  scheduled %6s  container started %6s  Ready %6s", r.name, since(r.created), since(r.scheduled), since(r.started), since(r.ready))
	}
	b.Logf("  the endpoint answered /readyz at %s", ready.Round(100*time.Millisecond))
	for _, p := range pods.Items {
		if p.Labels[hosted.LabelComponent] != "kube-apiserver" {
			continue
		}
		raw, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(b.Context())
		if err != nil {
			b.Logf("  logs of %s: %v", p.Name, err)
			continue
		}
		b.Logf("  %s: %s", p.Name, apiServerMilestones(string(raw), t0))
	}
}

// apiServerMilestones finds, in a kube-apiserver's log (klog lines, which
// carry the time of day), its first line, the last failed connection to
// etcd and the line that says it serves, relative to t0 (same day, UTC).
func apiServerMilestones(log string, t0 time.Time) string {
	at := func(line string) string {
		// "I1202 16:41:23.123456    1 file.go:12] ..."
		f := strings.Fields(line)
		if len(f) < 2 || len(f[0]) < 5 {
			return "?"
		}
		t, err := time.Parse("15:04:05.000000", f[1])
		if err != nil {
			return "?"
		}
		y, m, d := t0.UTC().Date()
		t = time.Date(y, m, d, t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
		return t.Sub(t0).Round(100 * time.Millisecond).String()
	}
	var first, lastEtcdErr, serving string
	for line := range strings.Lines(log) {
		if first == "" && (strings.HasPrefix(line, "I") || strings.HasPrefix(line, "W") || strings.HasPrefix(line, "E")) {
			first = at(line)
		}
		if strings.Contains(line, "2379") && (strings.Contains(line, "rror") || strings.Contains(line, "fail")) {
			lastEtcdErr = at(line)
		}
		if serving == "" && strings.Contains(line, "Serving securely") {
			serving = at(line)
		}
	}
	return fmt.Sprintf("first log line %s, last failed etcd connection %s, serving %s", dashIfEmpty(first), dashIfEmpty(lastEtcdErr), dashIfEmpty(serving))
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

// usage is what the kubelets' summary API reports for a set of
// containers: working set and CPU.
type usage struct {
	MemMB, CPUMilli float64
	Containers      map[string]*usage // by container name, within a namespace
}

func (u *usage) add(memMB, cpuMilli float64) {
	u.MemMB += memMB
	u.CPUMilli += cpuMilli
}

// idleUsage samples every Ready node's summary API (through the API
// server's node proxy) n times, every, apart: the working set of the last
// sample and the mean CPU of all, per namespace of fke's ("fke-..."), per
// container name within each, and for every pod under "". A namespace
// that ran nothing reads as zero.
func idleUsage(b *testing.B, cs kubernetes.Interface, n int, every time.Duration) map[string]usage {
	total := map[string]*usage{}
	get := func(m map[string]*usage, k string) *usage {
		if m[k] == nil {
			m[k] = &usage{Containers: map[string]*usage{}}
		}
		return m[k]
	}
	for i := range n {
		if i > 0 {
			time.Sleep(every) // the interval between samples, not a wait for state
		}
		nodes, err := cs.CoreV1().Nodes().List(b.Context(), metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, node := range nodes.Items {
			if !nodeutil.NodeReady(&node) {
				continue
			}
			raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node.Name, "proxy/stats/summary").DoRaw(b.Context())
			if err != nil {
				b.Fatalf("summary of %s: %v", node.Name, err)
			}
			// A field the kubelet leaves out (a container just started)
			// reads as zero.
			var sum struct {
				Pods []struct {
					PodRef     struct{ Namespace string } `json:"podRef"`
					Containers []struct {
						Name string `json:"name"`
						CPU  struct {
							UsageNanoCores uint64 `json:"usageNanoCores"`
						} `json:"cpu"`
						Memory struct {
							WorkingSetBytes uint64 `json:"workingSetBytes"`
						} `json:"memory"`
					} `json:"containers"`
				} `json:"pods"`
			}
			if err := json.Unmarshal(raw, &sum); err != nil {
				b.Fatalf("summary of %s: %v", node.Name, err)
			}
			for _, p := range sum.Pods {
				for _, c := range p.Containers {
					mem := 0.0 // the last sample's
					if i == n-1 {
						mem = float64(c.Memory.WorkingSetBytes) / 1e6
					}
					cpu := float64(c.CPU.UsageNanoCores) / 1e6 / float64(n)
					get(total, "").add(mem, cpu)
					if !strings.HasPrefix(p.PodRef.Namespace, "fke-") {
						continue
					}
					ns := get(total, p.PodRef.Namespace)
					ns.add(mem, cpu)
					get(ns.Containers, c.Name).add(mem, cpu)
				}
			}
		}
	}
	out := map[string]usage{}
	for k, u := range total {
		out[k] = *u
	}
	return out
}
