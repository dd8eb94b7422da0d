package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/test/testenv"
)

// releaseApp is the app a Release deploys in these tests: a ConfigMap
// whose data says which version runs, and a Deployment; broken gives the
// Deployment a node selector no node has, so it never becomes available.
func releaseApp(mode string, broken bool) map[string]string {
	sel := ""
	if broken {
		sel = "\n      nodeSelector: {fke.dev/no-such-node: \"true\"}"
	}
	return map[string]string{"app/app.yaml": fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: shop
data:
  mode: %s
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: registry.local/web:1
        resources: {requests: {cpu: 100m}}%s
`, mode, sel)}
}

func getRelease(t *testing.T, c client.Client, name string) *fkev1.Release {
	t.Helper()
	rel := &fkev1.Release{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, rel); err != nil {
		t.Fatal(err)
	}
	return rel
}

func stageOf(rel *fkev1.Release, name string) fkev1.ReleaseStageStatus {
	for _, st := range rel.Status.Stages {
		if st.Name == name {
			return st
		}
	}
	return fkev1.ReleaseStageStatus{}
}

// stageRuns says whether stage runs rev, healthy, on every target.
func stageRuns(rel *fkev1.Release, stage, rev string) error {
	st := stageOf(rel, stage)
	if st.Revision != rev || !st.Healthy {
		return fmt.Errorf("stage %s: revision %.12s healthy %v (waiting: %s), want %.12s healthy; conditions %v", stage, st.Revision, st.Healthy, st.Waiting, rev, rel.Status.Conditions)
	}
	for _, tg := range st.Targets {
		if tg.Revision != rev || tg.Health != "Current" {
			return fmt.Errorf("stage %s target %s: %.12s %s %s", stage, tg.Cluster, tg.Revision, tg.Health, tg.Message)
		}
	}
	return nil
}

func modeIn(t *testing.T, cs kubernetes.Interface) string {
	mode, _ := configMapData(t, cs, "shop", "settings")
	return mode
}

func condition(rel *fkev1.Release, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(rel.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// TestRelease drives a Release from a git repository made in the test
// (file://) across two clusters of kwok nodes, dev then prod: it follows a
// new commit, promotes to prod only after dev has been healthy for the
// soak time, rolls a broken commit back in dev and never lets it reach
// prod, reports drift and corrects it when asked, waits for an approval,
// suspends and resumes, applies a stage's revision again when its path
// changes; and bad sources leave everything as it was with a condition
// naming the problem.
func TestRelease(t *testing.T) {
	t.Parallel() // its time is mostly waits: it runs beside another such test
	e := testenv.Up(t)
	for _, name := range []string{"dev", "prod"} {
		e.MustRun("cluster", "create", name, "--wait", "--metrics-server=false", "--nodepool", "name=cpu,type=cpu-medium,replicas=1")
	}
	c := e.Client()
	dev, prod := e.Tenant("dev"), e.Tenant("prod")
	repo := testenv.NewGitRepo(t)
	c1 := repo.Commit(t, "v1", releaseApp("v1", false))
	const soak = 8 * time.Second

	t.Run("CEL refuses a bad URL and a stage without clusters", func(t *testing.T) {
		e := e.For(t)
		out := e.RunFail("release", "create", "bad", "--repo", "ftp://example.com/x", "--stage", "dev=dev")
		if !strings.Contains(out, "url must start with https://, ssh:// or file:///") {
			t.Errorf("want the URL rule in:\n%s", out)
		}
	})

	e.MustRun("release", "create", "shop", "--repo", repo.URL(), "--path", "app", "--interval", "2s", "--timeout", "15s",
		"--stage", "dev=dev", "--stage", fmt.Sprintf("prod=prod,soak=%s", soak))

	t.Run("first commit reaches dev, then prod after the soak", func(t *testing.T) {
		testenv.Eventually(t, 60*time.Second, "dev runs v1", func() error { return stageRuns(getRelease(t, c, "shop"), "dev", c1) })
		if got := modeIn(t, dev); got != "v1" {
			t.Fatalf("dev ConfigMap mode %q, want v1", got)
		}
		testenv.Eventually(t, 60*time.Second, "prod runs v1", func() error { return stageRuns(getRelease(t, c, "shop"), "prod", c1) })
		rel := getRelease(t, c, "shop")
		devHealthy := stageOf(rel, "dev").Targets[0].LastApplied.Time
		prodApplied := stageOf(rel, "prod").Targets[0].LastApplied.Time
		if gap := prodApplied.Sub(devHealthy); gap < soak {
			t.Fatalf("prod got v1 %s after dev was healthy with it, before the soak of %s", gap, soak)
		}
		if got := modeIn(t, prod); got != "v1" {
			t.Fatalf("prod ConfigMap mode %q, want v1", got)
		}
	})

	c2 := repo.Commit(t, "v2", releaseApp("v2", false))
	t.Run("a new commit goes to dev at once on sync; prod waits for the soak", func(t *testing.T) {
		e := e.For(t)
		start := time.Now()
		e.MustRun("release", "sync", "shop", "--wait")
		testenv.Eventually(t, 60*time.Second, "dev runs v2", func() error { return stageRuns(getRelease(t, c, "shop"), "dev", c2) })
		t.Logf("commit to dev Current after sync request: %s", time.Since(start))
		rel := getRelease(t, c, "shop")
		if p := stageOf(rel, "prod"); p.Revision != c1 || p.Pending != c2 || !strings.Contains(p.Waiting, "soaks in stage dev") {
			t.Fatalf("prod while dev soaks: revision %.12s pending %.12s waiting %q", p.Revision, p.Pending, p.Waiting)
		}
		if got := modeIn(t, prod); got != "v1" {
			t.Fatalf("prod ConfigMap mode %q during the soak, want v1", got)
		}
		testenv.Eventually(t, 60*time.Second, "prod runs v2", func() error { return stageRuns(getRelease(t, c, "shop"), "prod", c2) })
	})

	t.Run("a broken commit is rolled back in dev and never reaches prod", func(t *testing.T) {
		e := e.For(t)
		c3 := repo.Commit(t, "v3 broken", releaseApp("v3", true))
		e.MustRun("release", "sync", "shop", "--wait")
		testenv.Eventually(t, 90*time.Second, "dev rolled back", func() error {
			rel := getRelease(t, c, "shop")
			if cond := condition(rel, fkev1.ConditionPromoting); cond.Reason != fkev1.ReasonRolledBack {
				return fmt.Errorf("Promoting %s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
			if st := stageOf(rel, "dev"); st.FailedRevision != c3 {
				return fmt.Errorf("dev failed revision %.12s", st.FailedRevision)
			}
			return stageRuns(rel, "dev", c2)
		})
		rel := getRelease(t, c, "shop")
		msg := condition(rel, fkev1.ConditionPromoting).Message
		for _, want := range []string{"stage dev: revision " + c3[:12] + " did not become healthy", "rolled back to " + c2[:12], "promotion stopped"} {
			if !strings.Contains(msg, want) {
				t.Errorf("want %q in the Promoting condition: %s", want, msg)
			}
		}
		if got := modeIn(t, dev); got != "v2" {
			t.Fatalf("dev ConfigMap mode %q after the rollback, want v2", got)
		}
		// Past the soak, prod still runs v2 and was never given v3.
		testenv.Eventually(t, 30*time.Second, "a soak after the rollback", func() error {
			since := stageOf(getRelease(t, c, "shop"), "dev").HealthySince
			if since == nil || time.Since(since.Time) < soak+2*time.Second {
				return fmt.Errorf("dev healthy since %v", since)
			}
			return nil
		})
		rel = getRelease(t, c, "shop")
		if p := stageOf(rel, "prod"); p.Revision != c2 || p.Pending != "" {
			t.Fatalf("prod: revision %.12s pending %.12s, want %.12s and nothing pending", p.Revision, p.Pending, c2)
		}
		if out := e.MustRun("releases", "--cluster", "prod"); strings.Contains(out, c3[:12]) {
			t.Fatalf("prod has a revision of the broken commit:\n%s", out)
		}
		if got := modeIn(t, prod); got != "v2" {
			t.Fatalf("prod ConfigMap mode %q, want v2", got)
		}
		out := e.MustRun("release", "get", "shop")
		t.Logf("fke release get shop:\n%s", out)
		for _, want := range []string{"RolledBack", "FAILED", c3[:12]} {
			if !strings.Contains(out, want) {
				t.Errorf("want %q in fke release get:\n%s", want, out)
			}
		}
	})

	t.Run("drift is reported, then corrected when asked", func(t *testing.T) {
		cm, err := dev.CoreV1().ConfigMaps("shop").Get(context.Background(), "settings", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["mode"] = "edited by hand"
		if _, err := dev.CoreV1().ConfigMaps("shop").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "drift reported", func() error {
			rel := getRelease(t, c, "shop")
			if cond := condition(rel, fkev1.ConditionDrifted); cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "dev: ConfigMap shop/settings") {
				return fmt.Errorf("Drifted %s: %s", cond.Status, cond.Message)
			}
			return nil
		})
		if got := modeIn(t, dev); got != "edited by hand" {
			t.Fatalf("drift was corrected without correctDrift: mode %q", got)
		}
		rel := getRelease(t, c, "shop")
		patch := client.MergeFrom(rel.DeepCopy())
		rel.Spec.CorrectDrift = true
		if err := c.Patch(context.Background(), rel, patch); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "drift corrected", func() error {
			if got := modeIn(t, dev); got != "v2" {
				return fmt.Errorf("mode %q", got)
			}
			if cond := condition(getRelease(t, c, "shop"), fkev1.ConditionDrifted); cond.Status != metav1.ConditionFalse {
				return fmt.Errorf("Drifted %s: %s", cond.Status, cond.Message)
			}
			return nil
		})
	})

	t.Run("approval, suspend and resume", func(t *testing.T) {
		e := e.For(t)
		rel := getRelease(t, c, "shop")
		patch := client.MergeFrom(rel.DeepCopy())
		rel.Spec.Stages[1].RequireApproval = true
		if err := c.Patch(context.Background(), rel, patch); err != nil {
			t.Fatal(err)
		}
		e.MustRun("release", "suspend", "shop")
		testenv.Eventually(t, 30*time.Second, "suspended", func() error {
			if cond := condition(getRelease(t, c, "shop"), fkev1.ConditionSuspended); cond.Status != metav1.ConditionTrue {
				return fmt.Errorf("Suspended %s", cond.Status)
			}
			return nil
		})
		c4 := repo.Commit(t, "v4", releaseApp("v4", false))
		e.MustRun("release", "resume", "shop")
		testenv.Eventually(t, 60*time.Second, "dev runs v4", func() error { return stageRuns(getRelease(t, c, "shop"), "dev", c4) })
		testenv.Eventually(t, 30*time.Second, "prod waits for approval", func() error {
			if p := stageOf(getRelease(t, c, "shop"), "prod"); p.Pending != c4 || !strings.Contains(p.Waiting, "approval") {
				return fmt.Errorf("prod pending %.12s waiting %q", p.Pending, p.Waiting)
			}
			return nil
		})
		if out := e.MustRun("release", "approve", "shop", "--stage", "prod"); !strings.Contains(out, c4[:12]+" approved for stage prod") {
			t.Fatalf("approve said:\n%s", out)
		}
		testenv.Eventually(t, 60*time.Second, "prod runs v4", func() error { return stageRuns(getRelease(t, c, "shop"), "prod", c4) })
		out := e.MustRun("release", "list")
		if !strings.Contains(out, "dev="+c4[:12]+" prod="+c4[:12]) {
			t.Errorf("fke release list:\n%s", out)
		}
	})

	t.Run("a new path for a stage applies its revision again", func(t *testing.T) {
		e := e.For(t)
		files := releaseApp("v5", false)
		alt := releaseApp("v5-alt", false)
		files["alt/app.yaml"] = alt["app/app.yaml"]
		c5 := repo.Commit(t, "v5 with an alternative", files)
		e.MustRun("release", "sync", "shop", "--wait")
		testenv.Eventually(t, 60*time.Second, "dev runs v5", func() error { return stageRuns(getRelease(t, c, "shop"), "dev", c5) })
		rel := getRelease(t, c, "shop")
		patch := client.MergeFrom(rel.DeepCopy())
		rel.Spec.Stages[0].Path = "alt"
		if err := c.Patch(context.Background(), rel, patch); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 60*time.Second, "dev renders alt", func() error {
			if got := modeIn(t, dev); got != "v5-alt" {
				return fmt.Errorf("mode %q", got)
			}
			return stageRuns(getRelease(t, c, "shop"), "dev", c5)
		})
		if got := modeIn(t, prod); got != "v4" {
			t.Errorf("prod mode %q, want v4 (v5 waits for approval there)", got)
		}
	})

	t.Run("bad sources: a condition names the problem and nothing moves", func(t *testing.T) {
		e := e.For(t)
		good := getRelease(t, c, "shop").Status.Revision
		repo.Commit(t, "invalid YAML", map[string]string{"app/app.yaml": "kind: ConfigMap\n  metadata: [\n"})
		e.MustRun("release", "sync", "shop", "--wait")
		rel := getRelease(t, c, "shop")
		if cond := condition(rel, fkev1.ConditionSourceReady); cond.Reason != fkev1.ReasonRenderFailed || !strings.Contains(cond.Message, "app.yaml") || !strings.Contains(cond.Message, "keeping revision "+good[:12]) {
			t.Errorf("SourceReady after an invalid commit: %s %s", cond.Reason, cond.Message)
		}
		if rel.Status.Revision != good || stageOf(rel, "dev").Revision != good {
			t.Errorf("revision moved to %.12s (dev %.12s), want %.12s", rel.Status.Revision, stageOf(rel, "dev").Revision, good)
		}
		if got := modeIn(t, dev); got != "v5-alt" {
			t.Errorf("dev mode %q after an invalid commit, want v5-alt", got)
		}

		chart := repo.Commit(t, "a chart that does not render", map[string]string{
			"chart/Chart.yaml":        "apiVersion: v2\nname: broken\nversion: 0.1.0\n",
			"chart/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.name.missing }}\n",
		})
		for _, tc := range []struct {
			name, url, revision, path, reason, want string
		}{
			{"unreachable", "file:///no/such/repository", "main", ".", fkev1.ReasonRepositoryUnreachable, "repository unreachable"},
			{"norev", repo.URL(), "no-such-branch", "app", fkev1.ReasonRevisionNotFound, `has no branch, tag or commit "no-such-branch"`},
			{"nopath", repo.URL(), "main", "missing/dir", fkev1.ReasonPathNotFound, "path missing/dir does not exist in revision " + chart[:12]},
			{"norender", repo.URL(), "main", "chart", fkev1.ReasonRenderFailed, "does not render"},
		} {
			e.MustRun("release", "create", tc.name, "--repo", tc.url, "--revision", tc.revision, "--path", tc.path, "--stage", "dev=dev", "--interval", "1m")
			testenv.Eventually(t, 30*time.Second, tc.name+" says why", func() error {
				rel := getRelease(t, c, tc.name)
				cond := condition(rel, fkev1.ConditionSourceReady)
				if cond.Status != metav1.ConditionFalse || cond.Reason != tc.reason || !strings.Contains(cond.Message, tc.want) {
					return fmt.Errorf("SourceReady %s %s: %s", cond.Status, cond.Reason, cond.Message)
				}
				if rel.Status.Revision != "" || stageOf(rel, "dev").Revision != "" {
					return fmt.Errorf("revision %q, dev %q: something was taken", rel.Status.Revision, stageOf(rel, "dev").Revision)
				}
				return nil
			})
		}
		if out := e.MustRun("releases", "--cluster", "dev"); strings.Contains(out, "norender") || strings.Contains(out, "nopath") {
			t.Errorf("a bad release left a revision in dev:\n%s", out)
		}
	})
}

// versionedApp is releaseApp whose pod template carries the version, so
// each commit rolls out new pods.
func versionedApp(mode string) map[string]string {
	files := releaseApp(mode, false)
	files["app/app.yaml"] = strings.Replace(files["app/app.yaml"], "    metadata: {labels: {app: web}}",
		fmt.Sprintf("    metadata: {labels: {app: web}, annotations: {fke.dev/version: %s}}", mode), 1)
	return files
}

// setPodsOf writes into the status of the shop/web pods of version mode
// what the kubelet reports of a container that crash-loops (crashing) or
// runs and is ready. kwok runs no containers, and its pod stages leave the
// status of a Running pod alone, so what is written stays.
func setPodsOf(t *testing.T, cs kubernetes.Interface, mode string, crashing bool) {
	t.Helper()
	ctx := context.Background()
	pods, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations["fke.dev/version"] != mode || p.DeletionTimestamp != nil {
			continue
		}
		n++
		ready := corev1.ConditionTrue
		cs0 := corev1.ContainerStatus{Name: "web", Image: p.Spec.Containers[0].Image, Ready: true, RestartCount: 3,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}
		if crashing {
			ready = corev1.ConditionFalse
			cs0.Ready, cs0.State = false, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container=web"}}
			cs0.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs0}
		for j := range p.Status.Conditions {
			if c := &p.Status.Conditions[j]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
				c.Status, c.LastTransitionTime = ready, metav1.Now()
			}
		}
		if _, err := cs.CoreV1().Pods("shop").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatalf("no pod of shop/web %s", mode)
	}
}

// TestReleaseUnhealthyAfterSync: a revision that became healthy in dev and
// then turns unhealthy there (its container starts crash-looping) rolls
// dev back to the revision before once it has been unhealthy for
// unhealthyTimeout, says so, and never reaches prod; an unhealthy spell
// shorter than the timeout changes nothing.
func TestReleaseUnhealthyAfterSync(t *testing.T) {
	t.Parallel() // its time is mostly waits: it runs beside another such test
	e := testenv.Up(t)
	for _, name := range []string{"dev", "prod"} {
		e.MustRun("cluster", "create", name, "--wait", "--metrics-server=false", "--nodepool", "name=cpu,type=cpu-medium,replicas=1")
	}
	c := e.Client()
	dev := e.Tenant("dev")
	repo := testenv.NewGitRepo(t)
	c1 := repo.Commit(t, "v1", versionedApp("v1"))
	const soak, unhealthyTimeout = 20 * time.Second, 6 * time.Second

	t.Run("CEL refuses an unhealthy timeout out of bounds", func(t *testing.T) {
		e := e.For(t)
		out := e.RunFail("release", "create", "bad", "--repo", repo.URL(), "--stage", "dev=dev", "--unhealthy-timeout", "48h")
		if !strings.Contains(out, "unhealthyTimeout must be between 1s and 24h") {
			t.Errorf("want the unhealthyTimeout rule in:\n%s", out)
		}
	})

	e.MustRun("release", "create", "shop", "--repo", repo.URL(), "--path", "app", "--interval", "2s", "--timeout", "30s",
		"--unhealthy-timeout", unhealthyTimeout.String(), "--stage", "dev=dev", "--stage", fmt.Sprintf("prod=prod,soak=%s", soak))
	testenv.Eventually(t, 90*time.Second, "prod runs v1", func() error { return stageRuns(getRelease(t, c, "shop"), "prod", c1) })

	c2 := repo.Commit(t, "v2", versionedApp("v2"))
	e.MustRun("release", "sync", "shop", "--wait")
	testenv.Eventually(t, 60*time.Second, "dev runs v2", func() error { return stageRuns(getRelease(t, c, "shop"), "dev", c2) })

	t.Run("v2 turns unhealthy in dev: rolled back to v1 after the timeout, never promoted", func(t *testing.T) {
		e := e.For(t)
		setPodsOf(t, dev, "v2", true)
		broke := time.Now()
		testenv.Eventually(t, 60*time.Second, "dev rolled back to v1", func() error {
			rel := getRelease(t, c, "shop")
			if cond := condition(rel, fkev1.ConditionPromoting); cond.Reason != fkev1.ReasonRolledBack {
				return fmt.Errorf("Promoting %s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
			if st := stageOf(rel, "dev"); st.FailedRevision != c2 {
				return fmt.Errorf("dev failed revision %.12s", st.FailedRevision)
			}
			return stageRuns(rel, "dev", c1)
		})
		took := time.Since(broke)
		t.Logf("FIGURE unhealthy after a healthy sync -> rolled back and healthy again: %s (unhealthyTimeout %s, interval 2s)", took.Round(100*time.Millisecond), unhealthyTimeout)
		if took < unhealthyTimeout {
			t.Fatalf("rolled back %s after the pods broke, before the unhealthy timeout of %s", took, unhealthyTimeout)
		}
		rel := getRelease(t, c, "shop")
		msg := condition(rel, fkev1.ConditionPromoting).Message
		for _, want := range []string{
			"stage dev: revision " + c2[:12] + " was healthy, then unhealthy for more than 6s",
			"container web is crash-looping (restarts: 3; last exit code 1 Error)",
			"rolled back to " + c1[:12], "promotion of " + c2[:12] + " stopped",
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("want %q in the Promoting condition: %s", want, msg)
			}
		}
		if got := modeIn(t, dev); got != "v1" {
			t.Fatalf("dev ConfigMap mode %q after the rollback, want v1", got)
		}
		out := e.MustRun("release", "get", "shop")
		if !strings.Contains(out, "RolledBack") || !strings.Contains(out, "was healthy, then unhealthy") {
			t.Errorf("want the rollback and its event in fke release get:\n%s", out)
		}
		// Past the soak dev is healthy with v1 again; prod still runs v1 and
		// was never given v2.
		testenv.Eventually(t, 60*time.Second, "a soak after the rollback", func() error {
			since := stageOf(getRelease(t, c, "shop"), "dev").HealthySince
			if since == nil || time.Since(since.Time) < soak+2*time.Second {
				return fmt.Errorf("dev healthy since %v", since)
			}
			return nil
		})
		rel = getRelease(t, c, "shop")
		if p := stageOf(rel, "prod"); p.Revision != c1 || p.Pending != "" {
			t.Fatalf("prod: revision %.12s pending %.12s, want %.12s and nothing pending", p.Revision, p.Pending, c1)
		}
		if out := e.MustRun("releases", "--cluster", "prod"); strings.Contains(out, c2[:12]) {
			t.Fatalf("prod has a revision of v2:\n%s", out)
		}
	})

	t.Run("unhealthy for less than the timeout: nothing moves", func(t *testing.T) {
		setPodsOf(t, dev, "v1", true)
		testenv.Eventually(t, 30*time.Second, "dev seen unhealthy", func() error {
			if tg := stageOf(getRelease(t, c, "shop"), "dev").Targets[0]; tg.UnhealthySince == nil {
				return fmt.Errorf("dev %s %s", tg.Health, tg.Message)
			}
			return nil
		})
		if st := stageOf(getRelease(t, c, "shop"), "dev"); st.FailedRevision != c2 || st.Revision != c1 {
			t.Fatalf("dev judged at once: revision %.12s, failed %.12s", st.Revision, st.FailedRevision)
		}
		setPodsOf(t, dev, "v1", false)
		seen := time.Now()
		testenv.Eventually(t, 30*time.Second, "dev healthy again", func() error {
			return stageRuns(getRelease(t, c, "shop"), "dev", c1)
		})
		if took := time.Since(seen); took >= unhealthyTimeout {
			t.Skipf("dev took %s to be seen healthy again, not less than the unhealthy timeout: nothing to prove here", took)
		}
		// Healthy again for longer than the timeout: a rollback the short
		// spell had wrongly started would have come by now.
		testenv.Eventually(t, 30*time.Second, "dev healthy for longer than the unhealthy timeout", func() error {
			st := stageOf(getRelease(t, c, "shop"), "dev")
			if st.HealthySince == nil || time.Since(st.HealthySince.Time) < unhealthyTimeout+2*time.Second {
				return fmt.Errorf("dev healthy %v since %v", st.Healthy, st.HealthySince)
			}
			return nil
		})
		rel := getRelease(t, c, "shop")
		if st := stageOf(rel, "dev"); st.FailedRevision != c2 || st.Revision != c1 {
			t.Fatalf("dev after a short unhealthy spell: revision %.12s, failed %.12s; want %.12s, failed %.12s", st.Revision, st.FailedRevision, c1, c2)
		}
		if cond := condition(rel, fkev1.ConditionPromoting); !strings.Contains(cond.Message, "promotion of "+c2[:12]+" stopped") {
			t.Fatalf("Promoting changed after a short unhealthy spell: %s %s", cond.Reason, cond.Message)
		}
	})
}
