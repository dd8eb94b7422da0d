package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeprovider/kwok"
	"fke.dev/fke/test/testenv"
)

// BenchmarkRollout measures a GPU Deployment deleted and created again at
// once, its old pods still terminating (issue 17, part 6): 500 pods × 1 GPU
// (FKE_BENCH_ROLLOUT_PODS) fill 63 gpu-h100x8 nodes of an autoscaled pool
// (0..100); the Deployment is deleted and created again; the old pods stay
// Terminating for FKE_BENCH_ROLLOUT_STOP (a Go duration, default 0: kwok
// removes a deleted pod at once, as in the run; "20s" keeps them as
// pods whose containers take 20 s to stop). Reported: surplus nodes (the
// pool's peak machine count during the rollout above the nodes the pods
// need; target 0), the time from the delete to all new pods Running, and
// how many new pods were seen unschedulable and Nominated to the room of
// terminating pods.
//
//	go test ./bench -run '^$' -bench Rollout -benchtime 1x -timeout 30m -v
func BenchmarkRollout(b *testing.B) {
	pods := 500
	if v, err := strconv.Atoi(os.Getenv("FKE_BENCH_ROLLOUT_PODS")); err == nil && v > 0 {
		pods = v
	}
	var stop time.Duration
	if v := os.Getenv("FKE_BENCH_ROLLOUT_STOP"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("FKE_BENCH_ROLLOUT_STOP=%q: want a Go duration such as 20s: %v", v, err)
		}
		stop = d
	}
	need := (pods + 7) / 8
	e := testenv.Up(b)
	ctx := context.Background()
	e.MustRun("cluster", "create", "bench", "--wait",
		"--nodepool", fmt.Sprintf("name=gpu,type=gpu-h100x8,min=0,max=%d", need+need/2))
	cs := e.Tenant("bench")

	create := func() {
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, rolloutDeployment(int32(pods), stop), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	create()
	waitFor(b, 10*time.Minute, "first rollout Running", func() (bool, string) {
		running, total, err := countRunning(ctx, cs, "tier=rollout")
		if err != nil {
			return false, err.Error()
		}
		return running == pods && total == pods, fmt.Sprintf("%d/%d running (%d created)", running, pods, total)
	})
	before := machines(b, e.Client())
	b.Logf("%d pods × 1 GPU Running on %d machines (%d needed)", pods, before, need)

	old, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "tier=rollout"})
	if err != nil {
		b.Fatal(err)
	}
	oldUIDs := map[types.UID]bool{}
	for _, p := range old.Items {
		oldUIDs[p.UID] = true
	}
	managerLog := filepath.Join(e.DataDir, "logs", "fke-manager.log")
	var logOffset int64
	if fi, err := os.Stat(managerLog); err == nil {
		logOffset = fi.Size()
	}
	peak := &peakMachines{c: e.Client(), peak: before}
	peak.start()
	start := time.Now()
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "rollout", metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, time.Minute, "deployment deleted", func() (bool, string) {
		_, err := cs.AppsV1().Deployments("default").Get(ctx, "rollout", metav1.GetOptions{})
		return err != nil, "still there"
	})
	create()
	// The timeline: when the old pods were all gone, when half the new
	// ones ran.
	var oldGone, halfRunning time.Duration
	waitFor(b, 10*time.Minute, "new pods Running, old ones gone", func() (bool, string) {
		running, oldLeft, total, err := countRollout(ctx, cs, oldUIDs)
		if err != nil {
			return false, err.Error()
		}
		if oldLeft == 0 && oldGone == 0 {
			oldGone = time.Since(start)
		}
		if running >= pods/2 && halfRunning == 0 {
			halfRunning = time.Since(start)
		}
		return running == pods && oldLeft == 0, fmt.Sprintf("%d/%d new running, %d old left, %d in all", running, pods, oldLeft, total)
	})
	took := time.Since(start)
	top := peak.stop()
	nominated, triggered := rolloutEvents(ctx, b, cs)
	// The scale-ups decided during the rollout, if any, with their reasons.
	if data, err := os.ReadFile(managerLog); err == nil && int64(len(data)) >= logOffset {
		for _, line := range strings.Split(string(data[logOffset:]), "\n") {
			if strings.Contains(line, `"scale-up"`) {
				b.Log(line)
			}
		}
	}
	b.ReportMetric(float64(top-need), "surplus-nodes")
	b.ReportMetric(took.Seconds(), "s-all-running")
	b.ReportMetric(float64(nominated), "pods-nominated-terminating")
	b.Logf("rollout of %d pods (old pods stop in %s): all Running %s after the delete (old pods all gone at %s, half the new ones Running at %s); machines %d → peak %d (surplus %d); "+
		"%d pods Nominated to the room of terminating pods, %d TriggeredScaleUp events",
		pods, stop, took.Round(100*time.Millisecond), oldGone.Round(100*time.Millisecond), halfRunning.Round(100*time.Millisecond), before, top, top-need, nominated, triggered)
}

// rolloutDeployment is replicas pods × 1 GPU written as users write them
// (no toleration), labelled tier=rollout; on kwok nodes they stay
// Terminating for stop once deleted.
func rolloutDeployment(replicas int32, stop time.Duration) *appsv1.Deployment {
	d := deployment("rollout", "rollout", replicas, corev1.PodSpec{
		Containers: []corev1.Container{{Name: "serve", Image: "registry.local/serve:1", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
		}}},
	})
	if stop > 0 {
		d.Spec.Template.Annotations = map[string]string{kwok.AnnotationPodDeleteDelay: stop.String()}
	}
	return d
}

// countRollout counts the rollout's pods: new ones (not in old) Running and
// not terminating, old ones left, and all.
func countRollout(ctx context.Context, cs kubernetes.Interface, old map[types.UID]bool) (running, oldLeft, total int, err error) {
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "tier=rollout", ResourceVersion: "0"})
	if err != nil {
		return 0, 0, 0, err
	}
	for i := range list.Items {
		p := &list.Items[i]
		switch {
		case old[p.UID]:
			oldLeft++
		case p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning:
			running++
		}
	}
	return running, oldLeft, len(list.Items), nil
}

// rolloutEvents counts the pods told they wait for terminating pods, and
// the TriggeredScaleUp events on pods.
func rolloutEvents(ctx context.Context, b *testing.B, cs kubernetes.Interface) (nominated, triggered int) {
	for _, reason := range []string{"Nominated", "TriggeredScaleUp"} {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range evs.Items {
			switch {
			case reason == "TriggeredScaleUp":
				triggered++
			case strings.Contains(ev.Message, "terminating"):
				nominated++
			}
		}
	}
	return nominated, triggered
}

func machines(b *testing.B, c client.Client) int {
	var ms fkev1.MachineList
	if err := c.List(context.Background(), &ms, client.MatchingLabels{fkev1.LabelNodePool: "gpu"}); err != nil {
		b.Fatal(err)
	}
	return len(ms.Items)
}

// peakMachines polls the gpu pool's machine count every 100 ms.
type peakMachines struct {
	c    client.Client
	mu   sync.Mutex
	peak int
	quit chan struct{}
	done chan struct{}
}

func (p *peakMachines) start() {
	p.quit, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.quit:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var ms fkev1.MachineList
			if err := p.c.List(context.Background(), &ms, client.MatchingLabels{fkev1.LabelNodePool: "gpu"}); err == nil {
				p.mu.Lock()
				p.peak = max(p.peak, len(ms.Items))
				p.mu.Unlock()
			}
		}
	}()
}

func (p *peakMachines) stop() int {
	close(p.quit)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak
}
