package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/test/testenv"
)

// standbyPlanes returns the warm pool's unclaimed planes: id -> CA.
func standbyPlanes(t *testing.T, e *testenv.Env) map[string][]byte {
	t.Helper()
	planes, err := e.StandbyPlanes()
	if err != nil {
		t.Fatal(err)
	}
	return planes
}

// waitPoolReady waits until `fke status` reports n of n planes ready, as
// observed by a manager started after since.
func waitPoolReady(t *testing.T, e *testenv.Env, n int, since time.Time, timeout time.Duration) {
	t.Helper()
	want := fmt.Sprintf("%d of %d standby control planes ready, 0 starting", n, n)
	testenv.Eventually(t, timeout, "warm pool full", func() error {
		status, err := e.PoolStatus()
		if err != nil {
			return err
		}
		if observed, err := time.Parse(time.RFC3339, status["observedSince"]); err != nil || observed.Before(since.Truncate(time.Second)) {
			return fmt.Errorf("pool status written by a manager started at %q, before %s", status["observedSince"], since)
		}
		out, err := e.Run("status")
		if err != nil {
			return err
		}
		if !strings.Contains(out, want) {
			return fmt.Errorf("fke status says: %s", out[strings.LastIndex(out, "Warm pool:"):])
		}
		return nil
	})
}

// standbyProcs counts the processes that run with a standby plane's data.
func standbyProcs(e *testenv.Env, id string) int {
	return len(testenv.FindProcs(filepath.Join(e.DataDir, "clusters", ".standby", id) + "/"))
}

// TestWarmPool: with a pool of two, three clusters created at once get two
// standby planes and one cold start; no two share a plane or a CA, each
// is reached only with its own credentials, and the pool refills. A
// manager killed with planes in the pool loses none and leaks none, and
// interrupts no tenant API: every process of the pool and of the
// clusters, warm or cold, runs on (issue #35: the planes taken from the
// pool were replaced, their APIs down for seconds), and no cluster is
// said to be not ready; `fke down` stops the pool's processes too.
func TestWarmPool(t *testing.T) {
	start := time.Now()
	e := testenv.Up(t, "--warm-pool=2")
	ctx := context.Background()
	waitPoolReady(t, e, 2, start, 3*time.Minute)
	planes := standbyPlanes(t, e)
	if len(planes) != 2 {
		t.Fatalf("want 2 standby planes, found %d", len(planes))
	}
	for id := range planes {
		// fke up's default: one process per plane.
		if n := standbyProcs(e, id); n != 1 || testenv.PlaneProcs(t, filepath.Join(e.DataDir, "clusters", ".standby", id)) != 1 {
			t.Fatalf("standby plane %s runs %d processes, want 1 (fke up runs one-process planes)", id, n)
		}
	}

	names := []string{"warm-a", "warm-b", "warm-c"}
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := e.Run("cluster", "create", n, "--wait"); err != nil {
				t.Errorf("cluster create %s: %v\n%s", n, err, out)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	fromPool, cas, cold := 0, map[string]string{}, ""
	for _, n := range names {
		secret := &corev1.Secret{}
		if err := e.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: fkev1.PKISecretName(n)}, secret); err != nil {
			t.Fatal(err)
		}
		ca := secret.Data[pki.CACertFile]
		if other, ok := cas[string(ca)]; ok {
			t.Fatalf("clusters %s and %s hold the same CA", other, n)
		}
		cas[string(ca)] = n
		warm := false
		for _, planeCA := range planes {
			if bytes.Equal(ca, planeCA) {
				fromPool++
				warm = true
			}
		}
		if !warm {
			cold = n
		}
	}
	if fromPool != 2 {
		t.Fatalf("%d clusters hold a standby plane's CA, want 2 (pool of 2, 3 clusters)", fromPool)
	}
	// Each answers its own credentials only.
	cfgA, cfgB := e.TenantConfig("warm-a"), e.TenantConfig("warm-b")
	for _, n := range names {
		if _, err := e.Tenant(n).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("cluster %s with its own kubeconfig: %v", n, err)
		}
	}
	cross := *cfgA
	cross.Host = cfgB.Host
	if _, err := kubernetes.NewForConfigOrDie(&cross).CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("warm-a's credentials were accepted by warm-b's API server")
	}
	waitPoolReady(t, e, 2, start, 3*time.Minute)
	refilled := standbyPlanes(t, e)
	for id := range refilled {
		if _, old := planes[id]; old {
			t.Fatalf("plane %s stayed in the pool after a claim", id)
		}
	}

	// The manager dies (SIGKILL) with planes in the pool, clusters from it
	// and one started cold: every process runs on (the pool's planes, the
	// clusters' planes and addons, none replaced), each tenant API answers
	// every request of a probe through the kill and the restart, no
	// cluster is said to be not ready at any time, and each says its
	// processes were taken over.
	pids := tenantProcs(e)
	t.Logf("before the manager's kill: %d tenant processes; %s started cold", len(pids), cold)
	probes := map[string]*testenv.Probe{}
	for _, n := range names {
		p, err := testenv.ProbeAPI(e.TenantConfig(n), "/api/v1/namespaces/default", 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		probes[n] = p
	}
	watch := watchClusters(e)
	killed := testenv.KillPID(t, e.ComponentPID("fke-manager"))
	testenv.Eventually(t, time.Minute, "fke-manager serving again", e.ManagerReadyz)
	waitPoolReady(t, e, 2, killed, 3*time.Minute)
	for _, n := range names {
		// Not fatal: what follows says why a cluster's plane was not
		// taken over.
		if err := waitClusterEvent(t, e, n, "ControlPlaneAdopted", killed, time.Minute); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	restarted := time.Since(killed)
	for _, n := range names {
		gap, summary := probes[n].Stop()
		t.Logf("%s's API through the manager's kill and restart (%.1fs): %s", n, restarted.Seconds(), summary)
		if gap != 0 {
			t.Errorf("%s's API failed requests while the manager restarted: %s", n, summary)
		}
	}
	for _, seen := range watch() {
		t.Errorf("after the manager's restart: %s", seen)
	}
	if evs := clusterEvents(t, e, "ControlPlaneNotReady", killed); len(evs) > 0 {
		t.Errorf("ControlPlaneNotReady events after the manager's restart: %q", evs)
	}
	if now := tenantProcs(e); !maps.Equal(now, pids) {
		t.Errorf("tenant processes before the manager's kill %v, after its restart %v: want the same", pids, now)
	}
	after := standbyPlanes(t, e)
	if !slices.Equal(planeIDs(after), planeIDs(refilled)) {
		t.Fatalf("planes after the manager restart %v, before %v", planeIDs(after), planeIDs(refilled))
	}
	// The pool's planes hold data; the claimed planes' old places are
	// links to their clusters' directories, kept while the processes
	// taken over run with the old paths.
	dirs, links := standbyEntries(t, e)
	if !slices.Equal(dirs, planeIDs(after)) {
		t.Fatalf("standby data %v, want exactly the planes %v", dirs, planeIDs(after))
	}
	var fromPoolDirs []string
	for _, n := range names {
		if n != cold {
			fromPoolDirs = append(fromPoolDirs, e.ClusterDir(n))
		}
	}
	if got := slices.Sorted(maps.Values(links)); !slices.Equal(got, fromPoolDirs) {
		t.Fatalf("standby links name %v, want the directories of the clusters from the pool %v", got, fromPoolDirs)
	}
	for id := range after {
		if n, want := standbyProcs(e, id), testenv.PlaneProcs(t, filepath.Join(e.DataDir, "clusters", ".standby", id)); n != want {
			t.Fatalf("standby plane %s runs %d processes after the restart, want %d", id, n, want)
		}
	}

	e.MustRun("cluster", "delete", "warm-a", "--wait")
	if _, err := os.Stat(e.ClusterDir("warm-a")); !os.IsNotExist(err) {
		t.Fatalf("warm-a's data left after delete: %v", err)
	}
	// The link to a deleted cluster's directory goes at the pool's next step.
	testenv.Eventually(t, 30*time.Second, "the link to warm-a's directory removed", func() error {
		if _, links := standbyEntries(t, e); slices.Contains(slices.Collect(maps.Values(links)), e.ClusterDir("warm-a")) {
			return fmt.Errorf("standby links: %v", links)
		}
		return nil
	})
	e.MustRun("down")
	if left := testenv.FindProcs(e.DataDir); len(left) > 0 {
		t.Fatalf("processes left after fke down: %v", left)
	}
}

func planeIDs(m map[string][]byte) []string {
	return slices.Sorted(maps.Keys(m))
}

// standbyEntries returns what the standby planes' directory holds: the
// directories (planes' data) and the links (an adopted plane's old place
// -> the directory its data moved to).
func standbyEntries(t *testing.T, e *testenv.Env) ([]string, map[string]string) {
	t.Helper()
	dir := filepath.Join(e.DataDir, "clusters", ".standby")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	links := map[string]string{}
	for _, d := range entries {
		if d.Type()&os.ModeSymlink != 0 {
			target, err := os.Readlink(filepath.Join(dir, d.Name()))
			if err != nil {
				t.Fatal(err)
			}
			links[d.Name()] = target
			continue
		}
		dirs = append(dirs, d.Name())
	}
	return dirs, links
}

// tenantProcs returns the processes that run with the tenant control
// planes' data (the pool's planes, the clusters' planes and addons): pid
// -> command.
func tenantProcs(e *testenv.Env) map[int]string {
	out := map[int]string{}
	for _, p := range testenv.FindProcs(filepath.Join(e.DataDir, "clusters") + "/") {
		out[p.PID] = filepath.Base(p.Args[0])
	}
	return out
}

// watchClusters polls the clusters every 100 ms until the returned
// function is called, which returns each sighting of a cluster whose
// ControlPlaneReady or Ready condition was not True (each once).
func watchClusters(e *testenv.Env) func() []string {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var seen []string
	c := e.Client()
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			var list fkev1.ClusterList
			if err := c.List(ctx, &list); err == nil {
				for _, cl := range list.Items {
					for _, typ := range []string{fkev1.ConditionControlPlaneReady, fkev1.ConditionReady} {
						if cond := meta.FindStatusCondition(cl.Status.Conditions, typ); cond != nil && cond.Status != metav1.ConditionTrue {
							if sighting := fmt.Sprintf("%s: %s %s %s: %s", cl.Name, typ, cond.Status, cond.Reason, cond.Message); !slices.Contains(seen, sighting) {
								seen = append(seen, sighting)
							}
						}
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() []string {
		cancel()
		<-done
		return seen
	}
}

// clusterEvents returns the notes of the events with reason about a
// Cluster in namespace default since the time given, as "cluster: note".
func clusterEvents(t *testing.T, e *testenv.Env, reason string, since time.Time) []string {
	t.Helper()
	var evs eventsv1.EventList
	if err := e.Client().List(context.Background(), &evs, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs.Items {
		at := ev.EventTime.Time
		if ev.Series != nil {
			at = ev.Series.LastObservedTime.Time
		}
		if ev.Reason == reason && ev.Regarding.Kind == "Cluster" && !at.Before(since.Truncate(time.Second)) {
			out = append(out, ev.Regarding.Name+": "+ev.Note)
		}
	}
	return out
}

// waitClusterEvent waits up to timeout for an event with reason about
// cluster name since the time given.
func waitClusterEvent(t *testing.T, e *testenv.Env, name, reason string, since time.Time, timeout time.Duration) error {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, ev := range clusterEvents(t, e, reason, since) {
			if strings.HasPrefix(ev, name+": ") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s event within %s", reason, timeout)
		}
		<-tick.C
	}
}
