package kwok_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"

	"fke.dev/fke/test/testenv"
)

// Environment of the scale check, which runs only when asked:
//
//	FKE_KWOK_SCALE=1 [FKE_KWOK_SCALE_NODES=1000] go test ./internal/nodeprovider/kwok -run TestScale -v
const (
	envScale      = "FKE_KWOK_SCALE"
	envScaleNodes = "FKE_KWOK_SCALE_NODES"
	// scaleTarget is the target for 1,000 nodes, from the first
	// Create to the last node Ready.
	scaleTarget     = 60 * time.Second
	scaleCreators   = 32
	defaultScaleN   = 1000
	scaleMaxTimeout = 5 * time.Minute
)

func TestScaleNodesReady(t *testing.T) {
	if testing.Short() || os.Getenv(envScale) == "" {
		t.Skipf("scale check: set %s=1 to run it", envScale)
	}
	n := defaultScaleN
	if v := os.Getenv(envScaleNodes); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number", envScaleNodes, v)
		}
	}
	tc := upTenant(t)
	ctx := t.Context()

	// Watch the nodes locally, so that counting them does not load the API server.
	factory := informers.NewSharedInformerFactory(tc.client, 0)
	nodes := factory.Core().V1().Nodes().Lister()
	factory.Start(ctx.Done())
	t.Cleanup(factory.Shutdown)
	factory.WaitForCacheSync(ctx.Done())

	start := time.Now()
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		failed  error
	)
	for range scaleCreators {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if _, err := tc.provider.Create(ctx, tc.cluster, gpuNodeSpec(tc.cluster.Name, fmt.Sprintf("gpu-%05d", i))); err != nil {
					errOnce.Do(func() { failed = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if failed != nil {
		t.Fatalf("creating nodes: %v", failed)
	}
	created := time.Since(start)
	t.Logf("created %d nodes in %s", n, created.Round(time.Millisecond))

	// Ready is kwok's doing; the not-ready taint goes when
	// kube-controller-manager next looks (every 5s), and pods can land.
	allReady := waitNodes(t, nodes.List, n, start, "Ready", nodeReady)
	allSchedulable := waitNodes(t, nodes.List, n, start, "Ready and untainted", func(node *corev1.Node) bool {
		return nodeReady(node) && !hasTaint(node, corev1.TaintNodeNotReady)
	})
	t.Logf("%d nodes Ready %s and schedulable %s after the first Create (target %s); kwok RSS %s",
		n, allReady.Round(time.Millisecond), allSchedulable.Round(time.Millisecond), scaleTarget, rss(tc.provider.Pid(tc.cluster.Key)))
	if n >= defaultScaleN && allReady > scaleTarget {
		t.Errorf("%d nodes took %s to be Ready, want <= %s", n, allReady.Round(time.Millisecond), scaleTarget)
	}
}

// waitNodes waits until n demo nodes satisfy ok and returns the time since start.
func waitNodes(t *testing.T, list func(labels.Selector) ([]*corev1.Node, error), n int, start time.Time, what string, ok func(*corev1.Node) bool) time.Duration {
	t.Helper()
	var took time.Duration
	testenv.Eventually(t, scaleMaxTimeout, fmt.Sprintf("%d nodes %s", n, what), func() error {
		all, err := list(labels.Everything())
		if err != nil {
			return err
		}
		count := 0
		for _, node := range all {
			if strings.HasPrefix(node.Name, "demo-gpu-") && ok(node) {
				count++
			}
		}
		if count < n {
			return fmt.Errorf("%d of %d %s", count, n, what)
		}
		took = time.Since(start)
		return nil
	})
	return took
}

func hasTaint(node *corev1.Node, key string) bool {
	for _, taint := range node.Spec.Taints {
		if taint.Key == key {
			return true
		}
	}
	return false
}

// rss returns the resident memory of pid as /proc reports it.
func rss(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
