package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controller/autoscaler"
	"fke.dev/fke/test/testenv"
)

// Sizes of the fleet benchmark (environment overrides for quick runs).
func sizes() (nodes, pods, burst int) {
	get := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	return get("FKE_BENCH_NODES", 1000), get("FKE_BENCH_PODS", 30000), get("FKE_BENCH_BURST", 500)
}

// BenchmarkFleet measures, on one tenant cluster:
//
//  1. a GPU pool (gpu-h100x8, kwok) scaled 0 → 1,000 nodes: time until every
//     node is Ready (issue target ≤ 60 s);
//  2. 30,000 pods (30 Deployments × 1,000 replicas) on it: time until every
//     pod is Running;
//  3. then a burst of 500 pending pods × 8 GPUs for an autoscaled pool
//     (gpu-h200x8, 0..600): per pod, the time from becoming unschedulable to
//     the scale-up decision that helps it (p50/p99; target p99 ≤ 1 s), the
//     time until all 500 run, and surplus nodes (target 0);
//
// with the peak resident memory of fke-manager, kwok and the tenant
// kube-apiserver over the whole run.
//
//	go test ./bench -run '^$' -bench Fleet -benchtime 1x -timeout 60m -v
func BenchmarkFleet(b *testing.B) {
	nodes, pods, burst := sizes()
	e := testenv.Up(b)
	ctx := context.Background()
	e.MustRun("cluster", "create", "bench", "--wait",
		"--nodepool", "name=fleet,type=gpu-h100x8,replicas=0",
		"--nodepool", fmt.Sprintf("name=burst,type=gpu-h200x8,min=0,max=%d", burst+burst/5))
	cs := e.Tenant("bench")
	mem := startMemorySampler(e.DataDir)
	defer mem.stop()

	// 1. Nodes.
	start := time.Now()
	e.MustRun("nodepool", "scale", "bench/fleet", "--replicas", strconv.Itoa(nodes))
	waitFor(b, 10*time.Minute, "nodes Ready", func() (bool, string) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "fke.dev/nodepool=fleet", ResourceVersion: "0"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range list.Items {
			if nodeReadyAndSchedulable(&list.Items[i]) {
				ready++
			}
		}
		return ready == nodes, fmt.Sprintf("%d/%d ready", ready, nodes)
	})
	nodesReady := time.Since(start)
	b.ReportMetric(nodesReady.Seconds(), "s-nodes-ready")
	b.Logf("%d nodes Ready and untainted in %s", nodes, nodesReady)

	// 2. Pods.
	start = time.Now()
	perDeploy := 1000
	deploys := (pods + perDeploy - 1) / perDeploy
	for i := 0; i < deploys; i++ {
		n := min(perDeploy, pods-i*perDeploy)
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, smallDeployment(fmt.Sprintf("web-%02d", i), int32(n)), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, 30*time.Minute, "pods Running", func() (bool, string) {
		running, total, err := countRunning(ctx, cs, "tier=web")
		if err != nil {
			return false, err.Error()
		}
		return running == pods, fmt.Sprintf("%d/%d running (%d created)", running, pods, total)
	})
	podsRunning := time.Since(start)
	b.ReportMetric(podsRunning.Seconds(), "s-pods-running")
	b.Logf("%d pods Running in %s", pods, podsRunning)

	// 3. Burst of GPU pods for the autoscaled pool.
	managerLog := filepath.Join(e.DataDir, "logs", "fke-manager.log")
	var logOffset int64
	if fi, err := os.Stat(managerLog); err == nil {
		logOffset = fi.Size()
	}
	r := measureBurst(b, e, cs, burst)
	lat := r.latencies
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99 := lat[len(lat)/2], lat[(len(lat)*99)/100]
	b.ReportMetric(p50.Seconds(), "s-p50-decision")
	b.ReportMetric(p99.Seconds(), "s-p99-decision")
	b.ReportMetric(r.allRunning.Seconds(), "s-burst-running")
	b.ReportMetric(float64(r.poolNodes-burst), "surplus-nodes")
	b.ReportMetric(float64(r.seen), "pods-seen-unschedulable")
	b.Logf("burst of %d: %d seen unschedulable (first decision: %d scale-ups, %d nominated to machines coming up): decision p50 %s p99 %s max %s; "+
		"all Running after %s; pool nodes %d",
		burst, r.seen, r.seen-r.nominated, r.nominated, p50, p99, lat[len(lat)-1], r.allRunning, r.poolNodes)
	for _, s := range r.slowest {
		b.Logf("slow pod %s", s)
	}

	// The autoscaler logs each pass slower than autoscaler.SlowPass with
	// its phases; show the ones from the burst.
	if data, err := os.ReadFile(managerLog); err == nil && int64(len(data)) >= logOffset {
		slow := 0
		for _, line := range strings.Split(string(data[logOffset:]), "\n") {
			if strings.Contains(line, "slow autoscaler pass") {
				slow++
				if slow <= 20 {
					b.Log(line)
				}
			}
		}
		b.Logf("%d autoscaler passes slower than %s during the burst", slow, autoscaler.SlowPass)
	}

	peak := mem.stop()
	for name, mb := range peak {
		b.Logf("peak RSS %s: %.0f MB", name, mb)
	}
	b.ReportMetric(peak["total"], "MB-peak-rss")
	_ = e.Client().List(ctx, &fkev1.NodePoolList{})
}

// burstResult is what measureBurst measured.
type burstResult struct {
	// latencies: for each pod seen unschedulable, from the moment the
	// benchmark's watch saw it so to the autoscaler's first decision that
	// helps it: its first TriggeredScaleUp event (stamped with microseconds
	// right after the pool was resized) or Nominated event (it fits a
	// machine already coming up, or a Ready node not yet untainted).
	latencies []time.Duration
	// seen is the number of pods ever seen unschedulable. The others were
	// scheduled at their first try, onto nodes made for pods created earlier
	// that are still waiting for a retry; those get new nodes later.
	seen int
	// nominated is the number of pods whose first decision was Nominated.
	nominated int
	// slowest describes the three slowest pods.
	slowest    []string
	allRunning time.Duration
	poolNodes  int
}

// measureBurst creates burst pods needing one gpu-h200x8 node each and times
// the autoscaler's decision for each pod.
func measureBurst(b *testing.B, e *testenv.Env, cs kubernetes.Interface, burst int) burstResult {
	ctx := context.Background()
	var mu sync.Mutex
	unsched := map[string]time.Time{}

	pw, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "tier=burst"})
	if err != nil {
		b.Fatal(err)
	}
	defer pw.Stop()
	go func() {
		for ev := range pw.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					mu.Lock()
					if _, seen := unsched[p.Name]; !seen {
						unsched[p.Name] = time.Now()
					}
					mu.Unlock()
				}
			}
		}
	}()

	start := time.Now()
	d := gpuDeployment("train-burst", int32(burst))
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 30*time.Minute, "burst pods Running", func() (bool, string) {
		running, total, err := countRunning(ctx, cs, "tier=burst")
		if err != nil {
			return false, err.Error()
		}
		return running == burst, fmt.Sprintf("%d/%d running (%d created)", running, burst, total)
	})
	r := burstResult{allRunning: time.Since(start)}

	// The autoscaler records its events in the background: wait until every
	// pod seen unschedulable has its first decision event.
	type decision struct {
		at     time.Time
		reason string
	}
	decided := map[string]decision{}
	mu.Lock()
	seen := len(unsched)
	mu.Unlock()
	waitFor(b, time.Minute, "decision events recorded", func() (bool, string) {
		for _, reason := range []string{"TriggeredScaleUp", "Nominated"} {
			evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,reason=" + reason})
			if err != nil {
				return false, err.Error()
			}
			for _, ev := range evs.Items {
				at := ev.EventTime.Time
				if at.IsZero() {
					b.Fatalf("event %s has no eventTime", ev.Name)
				}
				if d, ok := decided[ev.InvolvedObject.Name]; !ok || at.Before(d.at) {
					decided[ev.InvolvedObject.Name] = decision{at, reason}
				}
			}
		}
		covered := 0
		mu.Lock()
		for name := range unsched {
			if _, ok := decided[name]; ok {
				covered++
			}
		}
		mu.Unlock()
		return covered == seen, fmt.Sprintf("%d of %d pods seen unschedulable have a decision event", covered, seen)
	})

	mu.Lock()
	defer mu.Unlock()
	r.seen = len(unsched)
	type waited struct {
		name string
		lat  time.Duration
	}
	var all []waited
	for name, t := range unsched {
		d := decided[name]
		r.latencies = append(r.latencies, max(d.at.Sub(t), 0))
		all = append(all, waited{name, max(d.at.Sub(t), 0)})
		if d.reason == "Nominated" {
			r.nominated++
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].lat > all[j].lat })
	for _, w := range all[:min(3, len(all))] {
		d := decided[w.name]
		r.slowest = append(r.slowest, fmt.Sprintf("%s: unschedulable at %s, %s at %s (%s)",
			w.name, unsched[w.name].Format("15:04:05.000"), d.reason, d.at.Format("15:04:05.000"), w.lat))
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "fke.dev/nodepool=burst"})
	if err != nil {
		b.Fatal(err)
	}
	r.poolNodes = len(list.Items)
	return r
}

func smallDeployment(name string, replicas int32) *appsv1.Deployment {
	return deployment(name, "web", replicas, corev1.PodSpec{
		Tolerations:  []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
		NodeSelector: map[string]string{"fke.dev/nodepool": "fleet"},
		Containers: []corev1.Container{{Name: "web", Image: "registry.local/web:1", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		}}},
	})
}

func gpuDeployment(name string, replicas int32) *appsv1.Deployment {
	return deployment(name, "burst", replicas, corev1.PodSpec{
		NodeSelector: map[string]string{"node.kubernetes.io/instance-type": "gpu-h200x8"},
		Containers: []corev1.Container{{Name: "train", Image: "registry.local/train:1", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")},
		}}},
	})
}

// deployment labels its pods app=<name> and tier=<tier>.
func deployment(name, tier string, replicas int32, spec corev1.PodSpec) *appsv1.Deployment {
	labels := map[string]string{"app": name, "tier": tier}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

func countRunning(ctx context.Context, cs kubernetes.Interface, selector string) (running, total int, err error) {
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
	if err != nil {
		return 0, 0, err
	}
	for i := range list.Items {
		if list.Items[i].Status.Phase == corev1.PodRunning {
			running++
		}
	}
	return running, len(list.Items), nil
}

func nodeReadyAndSchedulable(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitFor polls cond every second until it holds, logging progress.
func waitFor(b *testing.B, timeout time.Duration, what string, cond func() (bool, string)) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if msg != last {
			b.Logf("%s: %s", what, msg)
			last = msg
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not done after %s (%s)", what, timeout, msg)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// memorySampler records the peak RSS of fke-manager, kwok and the tenant kube-apiserver.
type memorySampler struct {
	mu   sync.Mutex
	peak map[string]float64
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func startMemorySampler(dataDir string) *memorySampler {
	m := &memorySampler{peak: map[string]float64{}, quit: make(chan struct{}), done: make(chan struct{})}
	match := map[string][]string{
		"fke-manager":           {" manager ", dataDir},
		"kwok":                  {"kwok", filepath.Join(dataDir, "clusters")},
		"tenant-kube-apiserver": {"kube-apiserver", filepath.Join(dataDir, "clusters")},
	}
	go func() {
		defer close(m.done)
		for {
			total := 0.0
			for name, needles := range match {
				mb := 0.0
				for _, p := range testenv.FindProcs(needles...) {
					mb += rssMB(p.PID)
				}
				total += mb
				m.mu.Lock()
				m.peak[name] = max(m.peak[name], mb)
				m.mu.Unlock()
			}
			m.mu.Lock()
			m.peak["total"] = max(m.peak["total"], total)
			m.mu.Unlock()
			select {
			case <-m.quit:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return m
}

func (m *memorySampler) stop() map[string]float64 {
	m.once.Do(func() { close(m.quit); <-m.done })
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]float64{}
	for k, v := range m.peak {
		out[k] = v
	}
	return out
}

// pssMB is a process's proportional set size: its private pages plus its
// share of the pages it shares (/proc/PID/smaps_rollup).
func pssMB(pid int) float64 { return procKB(pid, "smaps_rollup", "Pss:") / 1024 }

// rssMB is a process's resident set size (VmRSS).
func rssMB(pid int) float64 { return procKB(pid, "status", "VmRSS:") / 1024 }

// procKB reads the kB figure of the line starting with key in
// /proc/PID/file; 0 when the process or the line is gone.
func procKB(pid int, file, key string) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}
