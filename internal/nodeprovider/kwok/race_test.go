package kwok_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/nodeprovider/kwok"
	"fke.dev/fke/test/testenv"
)

// Environment of the race check:
//
//	FKE_KWOK_REDRIVE=off      the provider does not re-drive pods: kwok alone
//	FKE_KWOK_RACE_ROUNDS=n    rounds, each with a new kwok process (default 4)
const (
	envRedrive    = "FKE_KWOK_REDRIVE"
	envRaceRounds = "FKE_KWOK_RACE_ROUNDS"
	// raceNodes register at once in each round, each taking one pod.
	raceNodes = 40
	// raceStuckAfter is the provider's StuckPodAfter in this test.
	raceStuckAfter = 3 * time.Second
	// raceDeadline bounds a round: every pod Running. kwok plays a pod
	// within a second or two of its binding, or never.
	raceDeadline = 45 * time.Second
)

// TestPodsBindingWhileNodesRegister: many nodes register at once while
// pods are bound to them, half by the scheduler once their node is Ready,
// half before their node registers (created with its name): every pod
// runs.
//
// kwok v0.8.0 alone leaves some of them Pending for good: it skips a pod's
// events as "read only" (its debug log says so) until its Lease cache has
// the Lease it created for the pod's node, and resyncs a node's pods only
// once, when it has created that Lease; a pod bound before that resync whose
// resync event kwok handles before the Lease reaches its cache, or one
// whose binding kwok sees between the two, gets no other event. With kwok
// alone (FKE_KWOK_REDRIVE=off) about one round in three leaves a pod bound
// before its node Pending. The provider re-drives such pods
// (stuckpods.go). kwok checks the Lease for pods only when it started its
// node controller before its pod controller, a random order: each round
// runs a new kwok process.
func TestPodsBindingWhileNodesRegister(t *testing.T) {
	rounds := 4
	if v := os.Getenv(envRaceRounds); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds <= 0 {
			t.Fatalf("%s=%q: want a positive number", envRaceRounds, v)
		}
	}
	redrive := os.Getenv(envRedrive) != "off"
	tc := upTenantWith(t, func(o *kwok.Options) {
		o.StuckPodAfter = raceStuckAfter
		if !redrive {
			o.StuckPodAfter = -1
		}
		o.Binaries = binaries.Finder{Dir: debugKwok(t, o.Binaries.Dir)}
	})
	ctx := t.Context()
	// Unthrottled: the pods are bound when the test means them to be.
	cfg := rest.CopyConfig(tc.cluster.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	client := kubernetes.NewForConfigOrDie(cfg)
	kwokLog := filepath.Join(tc.dataDir, "default", "demo", "kwok", "kwok.log")
	testenv.Eventually(t, 30*time.Second, "default service account", func() error {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})

	var stuck, redriven int
	for round := range rounds {
		names := raceRound(t, tc, client, round)
		pending := waitRunning(t, client, names, raceDeadline)
		n := countRedriven(t, client, names)
		skipped := strings.Count(grepFile(kwokLog, `"Skip pod"`), `"read only"`)
		t.Logf("round %d: %d pods on %d new nodes: %d re-driven, %d not Running after %s; kwok skipped %d pod events as read only",
			round, raceNodes, raceNodes, n, len(pending), raceDeadline, skipped)
		for _, pod := range pending {
			t.Errorf("pod %s on node %q still %s after %s; kwok's log of it:\n%s", pod.Name, pod.Spec.NodeName, pod.Status.Phase,
				raceDeadline, grepFile(kwokLog, `"default/`+pod.Name+`"`))
		}
		stuck, redriven = stuck+len(pending), redriven+n
		keepFile(t, kwokLog, fmt.Sprintf("kwok-%d.log", round))
		cleanRound(t, tc, client, names)
		if err := tc.provider.Release(ctx, tc.cluster); err != nil { // the next round starts a new kwok
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds of %d pods: %d re-driven, %d left Pending", rounds, raceNodes, redriven, stuck)
}

// raceRound starts kwok and makes a round's nodes and pods: node i takes
// pod i; an odd pod waits for the scheduler, which binds it once its node
// is Ready; an even one is created bound to its node just before the node.
// It returns the pods' names (a node is named <cluster>-<pod>).
func raceRound(t *testing.T, tc tenant, client kubernetes.Interface, round int) []string {
	t.Helper()
	ctx := t.Context()
	names := make([]string, raceNodes)
	for i := range names {
		names[i] = fmt.Sprintf("r%d-%02d", round, i)
		if i%2 == 1 {
			if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod(names[i], 8), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := tc.provider.List(ctx, tc.cluster); err != nil { // kwok runs before the nodes come
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, raceNodes)
	for i, name := range names {
		wg.Go(func() {
			if i%2 == 0 {
				pod := gpuPod(name, 8)
				pod.Spec.NodeName = tc.cluster.Name + "-" + name
				if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
			_, err := tc.provider.Create(ctx, tc.cluster, gpuNodeSpec(tc.cluster.Name, name))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("creating nodes and pods: %v", err)
		}
	}
	return names
}

// waitRunning waits up to timeout for the pods named to be Running and
// returns those that are not.
func waitRunning(t *testing.T, client kubernetes.Interface, names []string, timeout time.Duration) []*corev1.Pod {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	deadline := time.Now().Add(timeout)
	for {
		list, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []*corev1.Pod
		for i := range list.Items {
			if p := &list.Items[i]; want[p.Name] && p.Status.Phase != corev1.PodRunning {
				out = append(out, p)
			}
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// countRedriven returns how many of the pods named the provider re-drove,
// checking that each has the Warning event that says so.
func countRedriven(t *testing.T, client kubernetes.Interface, names []string) int {
	t.Helper()
	n := 0
	for _, name := range names {
		pod, err := client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Annotations[kwok.AnnotationRedriven] == "" {
			continue
		}
		n++
		events, err := client.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range events.Items {
			found = found || ev.Type == corev1.EventTypeWarning && ev.Reason == kwok.EventReasonStuckOnKwokNode
		}
		if !found {
			t.Errorf("pod %s was re-driven without a Warning event %s", name, kwok.EventReasonStuckOnKwokNode)
		}
	}
	return n
}

// cleanRound deletes a round's pods and nodes and waits until they are gone.
func cleanRound(t *testing.T, tc tenant, client kubernetes.Interface, names []string) {
	t.Helper()
	ctx := t.Context()
	for _, name := range names {
		err := client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := tc.provider.Delete(ctx, tc.cluster, kwok.ProviderID(tc.cluster.Name, tc.cluster.Name+"-"+name)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "the round's pods and nodes gone", func() error {
		for _, name := range names {
			if _, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s: %v", name, err)
			}
			if _, err := client.CoreV1().Nodes().Get(ctx, tc.cluster.Name+"-"+name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("node of %s: %v", name, err)
			}
		}
		return nil
	})
}

// debugKwok returns a directory whose kwok runs the kwok of dir with debug
// logs: they say why kwok skips a pod.
func debugKwok(t *testing.T, dir string) string {
	t.Helper()
	real, err := (binaries.Finder{Dir: dir}).Path(binaries.Kwok)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	script := "#!/bin/sh\nexec " + strconv.Quote(real) + " \"$@\" --v=DEBUG\n"
	if err := os.WriteFile(filepath.Join(out, binaries.Kwok), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// keepFile copies path as name into the test's artifact directory (go
// test -artifacts keeps it).
func keepFile(t *testing.T, path, name string) {
	data, err := os.ReadFile(path)
	if err == nil {
		err = os.WriteFile(filepath.Join(t.ArtifactDir(), name), data, 0o644)
	}
	if err != nil {
		t.Logf("keeping %s: %v", path, err)
	}
}

// grepFile returns the lines of path that contain s.
func grepFile(path, s string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var b strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			b.WriteString(sc.Text())
			b.WriteByte('\n')
		}
	}
	return b.String()
}
