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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/controller/cluster"
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
// manager killed with planes in the pool loses none and leaks none; the
// clusters that claimed planes run from their own directories after it;
// `fke down` stops the pool's processes too.
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

	fromPool, cas := 0, map[string]string{}
	for _, n := range names {
		secret := &corev1.Secret{}
		if err := e.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: cluster.PKISecretName(n)}, secret); err != nil {
			t.Fatal(err)
		}
		ca := secret.Data[pki.CACertFile]
		if other, ok := cas[string(ca)]; ok {
			t.Fatalf("clusters %s and %s hold the same CA", other, n)
		}
		cas[string(ca)] = n
		for _, planeCA := range planes {
			if bytes.Equal(ca, planeCA) {
				fromPool++
			}
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

	// The manager dies with planes in the pool: they come back, the same
	// ones, and nothing else remains.
	killed := testenv.KillPID(t, e.ComponentPID("fke-manager"))
	testenv.Eventually(t, time.Minute, "fke-manager serving again", e.ManagerReadyz)
	waitPoolReady(t, e, 2, killed, 3*time.Minute)
	after := standbyPlanes(t, e)
	if !slices.Equal(planeIDs(after), planeIDs(refilled)) {
		t.Fatalf("planes after the manager restart %v, before %v", planeIDs(after), planeIDs(refilled))
	}
	entries, err := os.ReadDir(filepath.Join(e.DataDir, "clusters", ".standby"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, d := range entries {
		dirs = append(dirs, d.Name())
	}
	if !slices.Equal(dirs, planeIDs(after)) {
		t.Fatalf("standby data %v, want exactly the planes %v (the links of adopted planes removed)", dirs, planeIDs(after))
	}
	for id := range after {
		if n, want := standbyProcs(e, id), testenv.PlaneProcs(t, filepath.Join(e.DataDir, "clusters", ".standby", id)); n != want {
			t.Fatalf("standby plane %s runs %d processes after the restart, want %d", id, n, want)
		}
	}
	for _, n := range names {
		testenv.Eventually(t, time.Minute, n+" serving after the manager restart", func() error { return testenv.Readyz(e.TenantConfig(n)) })
		if got, want := len(testenv.FindProcs(e.ClusterDir(n)+"/")), testenv.PlaneProcs(t, e.ClusterDir(n)); got < want {
			t.Fatalf("%s: %d processes run from its own directory, want at least %d", n, got, want)
		}
	}

	e.MustRun("cluster", "delete", "warm-a", "--wait")
	if _, err := os.Stat(e.ClusterDir("warm-a")); !os.IsNotExist(err) {
		t.Fatalf("warm-a's data left after delete: %v", err)
	}
	e.MustRun("down")
	if left := testenv.FindProcs(e.DataDir); len(left) > 0 {
		t.Fatalf("processes left after fke down: %v", left)
	}
}

func planeIDs(m map[string][]byte) []string {
	return slices.Sorted(maps.Keys(m))
}
