package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/test/testenv"
)

// benchApp returns an app of 50 objects in namespace ns — ten each of
// Deployment (one replica), Service, ConfigMap, Secret and ServiceAccount —
// as two files (the Deployments apart, for kubectl rollout status), all
// labelled bench=label; version changes every Deployment's pod template.
func benchApp(ns, label, version string) map[string]string {
	var deps, rest strings.Builder
	for i := range 10 {
		name := fmt.Sprintf("svc-%02d", i)
		fmt.Fprintf(&deps, `---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: %[2]s, labels: {bench: %[3]s}}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      serviceAccountName: %[1]s
      containers:
      - name: app
        image: registry.local/app:1
        env: [{name: VERSION, value: "%[4]s"}]
        resources: {requests: {cpu: 10m}}
`, name, ns, label, version)
		fmt.Fprintf(&rest, `---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: %[2]s, labels: {bench: %[3]s}}
spec: {selector: {app: %[1]s}, ports: [{port: 80}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: %[1]s, namespace: %[2]s, labels: {bench: %[3]s}}
data: {version: "%[4]s"}
---
apiVersion: v1
kind: Secret
metadata: {name: %[1]s, namespace: %[2]s, labels: {bench: %[3]s}}
stringData: {token: "t-%[4]s"}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: %[1]s, namespace: %[2]s, labels: {bench: %[3]s}}
`, name, ns, label, version)
	}
	return map[string]string{"app/deployments.yaml": deps.String(), "app/rest.yaml": rest.String()}
}

func writeFiles(b *testing.B, dir string, files map[string]string) {
	b.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// rounds is FKE_BENCH_ROUNDS, default 3.
func rounds() int {
	if v, err := strconv.Atoi(os.Getenv("FKE_BENCH_ROUNDS")); err == nil && v > 0 {
		return v
	}
	return 3
}

func roundAll(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Round(10*time.Millisecond).String())
	}
	return strings.Join(s, ", ")
}

// BenchmarkDeployVsKubectl measures, on one cluster of kwok nodes, a
// 50-object app (10 Deployments of one replica, 10 each of Service,
// ConfigMap, Secret, ServiceAccount) brought to Current by `fke deploy`
// (server-side apply, inventory, kstatus wait) and by `kubectl apply
// --prune -l` followed by `kubectl rollout status` of its Deployments, in
// separate namespaces of the same cluster; first the create, then
// FKE_BENCH_ROUNDS (3) updates that roll every Deployment. Reported: the
// medians of the updates and the create times.
//
//	go test ./bench -run '^$' -bench DeployVsKubectl -benchtime 1x -v
func BenchmarkDeployVsKubectl(b *testing.B) {
	e := testenv.Up(b)
	e.MustRun("cluster", "create", "bench", "--wait", "--metrics-server=false", "--nodepool", "name=cpu,type=cpu-large,replicas=2")
	kc := filepath.Join(b.TempDir(), "bench.kubeconfig")
	if err := os.WriteFile(kc, []byte(e.MustRun("kubeconfig", "bench")), 0o600); err != nil {
		b.Fatal(err)
	}
	kubectl := func(args ...string) {
		cmd := exec.Command(filepath.Join(e.BinDir, "kubectl"), append([]string{"--kubeconfig", kc}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	kubectl("create", "namespace", "bench-fke")
	kubectl("create", "namespace", "bench-kubectl")
	n := rounds()
	var fke, kube []time.Duration
	for i := range n + 1 {
		version := fmt.Sprintf("v%d", i)
		dirF, dirK := b.TempDir(), b.TempDir()
		writeFiles(b, dirF, benchApp("bench-fke", "fke", version))
		writeFiles(b, dirK, benchApp("bench-kubectl", "kubectl", version))

		start := time.Now()
		e.MustRun("deploy", "-f", filepath.Join(dirF, "app"), "--cluster", "bench", "--name", "bench", "--prune", "--timeout", "5m")
		fke = append(fke, time.Since(start))

		start = time.Now()
		kubectl("apply", "-f", filepath.Join(dirK, "app"), "--prune", "-l", "bench=kubectl")
		kubectl("rollout", "status", "-f", filepath.Join(dirK, "app", "deployments.yaml"), "--timeout", "5m")
		kube = append(kube, time.Since(start))
	}
	b.Logf("FIGURE fke deploy, 50 objects: create %s; updates %s (median %s)", fke[0].Round(10*time.Millisecond), roundAll(fke[1:]), median(fke[1:]).Round(10*time.Millisecond))
	b.Logf("FIGURE kubectl apply --prune + rollout status, 50 objects: create %s; updates %s (median %s)", kube[0].Round(10*time.Millisecond), roundAll(kube[1:]), median(kube[1:]).Round(10*time.Millisecond))
	b.ReportMetric(fke[0].Seconds(), "s-fke-create")
	b.ReportMetric(median(fke[1:]).Seconds(), "s-fke-update")
	b.ReportMetric(kube[0].Seconds(), "s-kubectl-create")
	b.ReportMetric(median(kube[1:]).Seconds(), "s-kubectl-update")
}

// BenchmarkReleaseCommitToCurrent measures a Release (one stage, one
// cluster of kwok nodes, the 50-object app from a file:// repository): the
// time from a new commit to the target Current with the new revision,
// waiting for the poll (interval FKE_BENCH_RELEASE_INTERVAL, default 10s)
// and with `fke release sync` right after the commit;
// FKE_BENCH_ROUNDS (3) of each.
//
//	go test ./bench -run '^$' -bench ReleaseCommitToCurrent -benchtime 1x -v
func BenchmarkReleaseCommitToCurrent(b *testing.B) {
	interval := 10 * time.Second
	if v := os.Getenv("FKE_BENCH_RELEASE_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("FKE_BENCH_RELEASE_INTERVAL=%q: %v", v, err)
		}
		interval = d
	}
	e := testenv.Up(b)
	e.MustRun("cluster", "create", "bench", "--wait", "--metrics-server=false", "--nodepool", "name=cpu,type=cpu-large,replicas=2")
	repo := testenv.NewGitRepo(b)
	first := repo.Commit(b, "v0", benchApp("bench-git", "git", "v0"))
	e.MustRun("release", "create", "bench", "--repo", repo.URL(), "--path", "app", "--stage", "dev=bench",
		"--interval", interval.String(), "--target-namespace", "bench-git")
	c := e.Client()
	current := func(commit string, timeout time.Duration) time.Time {
		var at time.Time
		testenv.Eventually(b, timeout, "the target Current at "+commit[:12], func() error {
			rel := &fkev1.Release{}
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "bench"}, rel); err != nil {
				return err
			}
			for _, st := range rel.Status.Stages {
				for _, t := range st.Targets {
					if t.Revision == commit && t.Health == "Current" {
						at = time.Now()
						return nil
					}
				}
			}
			return fmt.Errorf("not yet")
		})
		return at
	}
	current(first, 3*time.Minute)
	n := rounds()
	var polled, synced []time.Duration
	for i := range n {
		commit := repo.Commit(b, "poll", benchApp("bench-git", "git", fmt.Sprintf("p%d", i)))
		start := time.Now()
		polled = append(polled, current(commit, interval+3*time.Minute).Sub(start))
	}
	for i := range n {
		commit := repo.Commit(b, "sync", benchApp("bench-git", "git", fmt.Sprintf("s%d", i)))
		start := time.Now()
		e.MustRun("release", "sync", "bench")
		synced = append(synced, current(commit, 3*time.Minute).Sub(start))
	}
	b.Logf("FIGURE Release, 50 objects, commit → target Current, poll every %s: %s (median %s)", interval, roundAll(polled), median(polled).Round(10*time.Millisecond))
	b.Logf("FIGURE Release, 50 objects, commit + fke release sync → target Current: %s (median %s)", roundAll(synced), median(synced).Round(10*time.Millisecond))
	b.ReportMetric(median(polled).Seconds(), "s-commit-to-current-poll")
	b.ReportMetric(median(synced).Seconds(), "s-commit-to-current-sync")
}
