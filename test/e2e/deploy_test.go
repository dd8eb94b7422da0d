package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/test/testenv"
)

// shopApp is a small app: its namespace, a ConfigMap and a Deployment.
// cm names the ConfigMap, mode its data, replicas and gpus the Deployment's
// size and what each pod asks for.
func shopApp(cm, mode string, replicas, gpus int) string {
	res := `{requests: {cpu: 100m}}`
	if gpus > 0 {
		res = fmt.Sprintf(`{requests: {cpu: 100m, nvidia.com/gpu: "%d"}, limits: {nvidia.com/gpu: "%d"}}`, gpus, gpus)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: %s
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
  replicas: %d
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: registry.local/web:1
        resources: %s
`, cm, mode, replicas, res)
}

// writeSource writes files (name → content) into a new directory.
func writeSource(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type revisionDoc struct {
	Release  string `json:"release"`
	Revision int    `json:"revision"`
	Status   string `json:"status"`
	Source   string `json:"source"`
	Message  string `json:"message"`
}

func releases(t *testing.T, e *testenv.Env, args ...string) []revisionDoc {
	t.Helper()
	out := e.MustRun(append([]string{"releases", "-o", "json"}, args...)...)
	var docs []revisionDoc
	if err := json.Unmarshal([]byte(out), &docs); err != nil {
		t.Fatalf("fke releases -o json: %v\n%s", err, out)
	}
	return docs
}

func statuses(docs []revisionDoc, release string) string {
	var s []string
	for _, d := range docs {
		if d.Release == release {
			s = append(s, fmt.Sprintf("%d:%s", d.Revision, d.Status))
		}
	}
	return strings.Join(s, " ")
}

func configMapData(t *testing.T, cs kubernetes.Interface, ns, name string) (string, bool) {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data["mode"], true
}

func deploymentReady(cs kubernetes.Interface, ns, name string, replicas int32, gpus string) error {
	d, err := cs.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if *d.Spec.Replicas != replicas || d.Status.AvailableReplicas != replicas || d.Status.UpdatedReplicas != replicas {
		return fmt.Errorf("deployment %s/%s: replicas %d, available %d, updated %d; want %d", ns, name, *d.Spec.Replicas, d.Status.AvailableReplicas, d.Status.UpdatedReplicas, replicas)
	}
	got := d.Spec.Template.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]
	if gpus != "" && got.String() != gpus || gpus == "" && !got.IsZero() {
		return fmt.Errorf("deployment %s/%s asks for %s GPUs per pod, want %q", ns, name, got.String(), gpus)
	}
	return nil
}

// TestDeploy drives fke deploy, rollback and releases against one tenant
// cluster with a CPU pool and an autoscaled GPU pool of kwok nodes: bad
// input is refused before anything is applied; a deploy waits until every
// object is ready; --dry-run shows the diff and the nodes the GPU pool
// would add, and changes nothing; --prune removes what the source dropped;
// a deploy that cannot become ready fails within its timeout with the
// reason (the scheduler's and the node autoscaler's) and, with
// --rollback-on-failure, returns to the last good revision; a failed Job
// fails the deploy; rollback by command; a Helm chart and a kustomization;
// and a CI runner with only a kubeconfig.
func TestDeploy(t *testing.T) {
	t.Parallel() // its time is mostly waits: it runs beside another such test
	e := testenv.Up(t)
	e.MustRun("cluster", "create", "apps", "--wait", "--metrics-server=false",
		"--nodepool", "name=cpu,type=cpu-medium,replicas=1", "--nodepool", "name=gpu,type=gpu-h100x8,min=0,max=2")
	cs := e.Tenant("apps")
	v1 := writeSource(t, map[string]string{"app.yaml": shopApp("settings", "v1", 2, 0)})

	t.Run("bad input is refused and nothing is applied", func(t *testing.T) {
		e := e.For(t)
		badYAML := writeSource(t, map[string]string{"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n   labels: x\n"})
		chart := writeSource(t, map[string]string{
			"Chart.yaml":        "apiVersion: v2\nname: broken\nversion: 0.1.0\n",
			"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.name.missing }}\n",
		})
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"-f", filepath.Join(t.TempDir(), "nothing"), "--cluster", "apps"}, "does not exist; nothing was applied"},
			{[]string{"-f", badYAML, "--cluster", "apps"}, filepath.Join(badYAML, "app.yaml") + ":5: invalid YAML: mapping values are not allowed"},
			{[]string{"-f", chart, "--cluster", "apps"}, "does not render"},
			{[]string{"-f", v1, "--cluster", "nope"}, `cluster "nope" not found`},
			{[]string{"-f", v1, "--cluster", "apps", "--set", "a=b"}, "--values and --set apply to Helm charts"},
			{[]string{"-f", v1}, "--cluster NAME, or --kubeconfig FILE"},
		} {
			out := e.RunFail(append([]string{"deploy"}, tc.args...)...)
			if !strings.Contains(out, tc.want) {
				t.Errorf("fke deploy %s: want %q in:\n%s", strings.Join(tc.args, " "), tc.want, out)
			}
		}
		if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "shop", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("namespace shop exists after refused deploys (err %v)", err)
		}
		if docs := releases(t, e, "--cluster", "apps"); len(docs) != 0 {
			t.Fatalf("revisions after refused deploys: %v", docs)
		}
	})

	t.Run("deploy waits until every object is ready", func(t *testing.T) {
		e := e.For(t)
		start := time.Now()
		out := e.MustRun("deploy", "-f", v1, "--cluster", "apps", "--name", "shop", "--timeout", "60s")
		took := time.Since(start)
		for _, want := range []string{"ready     Deployment shop/web", "ready     ConfigMap shop/settings", "release shop revision 1: every object is ready"} {
			if !strings.Contains(out, want) {
				t.Fatalf("want %q in:\n%s", want, out)
			}
		}
		if err := deploymentReady(cs, "shop", "web", 2, ""); err != nil {
			t.Fatal(err)
		}
		t.Logf("deploy of 3 objects to Current took %s", took)
	})

	v2 := writeSource(t, map[string]string{"app.yaml": shopApp("extra", "v2", 10, 1)})
	t.Run("dry run shows the diff and the capacity, and changes nothing", func(t *testing.T) {
		e := e.For(t)
		out := e.MustRun("deploy", "-f", v2, "--cluster", "apps", "--name", "shop", "--dry-run")
		for _, want := range []string{
			"--- Deployment shop/web (changed)", "-  replicas: 2", "+  replicas: 10",
			"--- ConfigMap shop/extra (created)",
			"capacity: 10 new or changed pods",
			"gpu   gpu-h100x8  0      +2", // 10 pods × 1 GPU on 8-GPU nodes
			"dry run: nothing was changed",
		} {
			if !strings.Contains(out, want) {
				t.Fatalf("want %q in:\n%s", want, out)
			}
		}
		if err := deploymentReady(cs, "shop", "web", 2, ""); err != nil {
			t.Fatal(err)
		}
		if _, ok := configMapData(t, cs, "shop", "extra"); ok {
			t.Fatal("dry run created ConfigMap extra")
		}
		if n := len(poolNodes(t, cs, "gpu")); n != 0 {
			t.Fatalf("dry run grew the GPU pool to %d nodes", n)
		}
		if got := statuses(releases(t, e, "--cluster", "apps"), "shop"); got != "1:deployed" {
			t.Fatalf("revisions after a dry run: %s", got)
		}
	})

	t.Run("without --prune old objects stay, with --prune they go", func(t *testing.T) {
		e := e.For(t)
		e.MustRun("deploy", "-f", v2, "--cluster", "apps", "--name", "shop", "--timeout", "90s")
		if err := deploymentReady(cs, "shop", "web", 10, "1"); err != nil {
			t.Fatal(err)
		}
		if n := len(poolNodes(t, cs, "gpu")); n != 2 {
			t.Fatalf("GPU pool has %d nodes for 10 pods × 1 GPU, want the 2 the dry run showed", n)
		}
		if _, ok := configMapData(t, cs, "shop", "settings"); !ok {
			t.Fatal("ConfigMap settings was pruned without --prune")
		}
		out := e.MustRun("deploy", "-f", v2, "--cluster", "apps", "--name", "shop", "--prune", "--timeout", "60s")
		if !strings.Contains(out, "pruned    ConfigMap shop/settings") {
			t.Fatalf("want ConfigMap settings pruned in:\n%s", out)
		}
		if _, ok := configMapData(t, cs, "shop", "settings"); ok {
			t.Fatal("ConfigMap settings still exists after --prune")
		}
	})

	t.Run("a deploy that cannot become ready fails with the reason and rolls back", func(t *testing.T) {
		e := e.For(t)
		v3 := writeSource(t, map[string]string{"app.yaml": shopApp("extra", "v3", 1, 16)})
		const timeout = 25 * time.Second
		start := time.Now()
		out := e.RunFail("deploy", "-f", v3, "--cluster", "apps", "--name", "shop", "--timeout", timeout.String(), "--rollback-on-failure")
		took := time.Since(start)
		for _, want := range []string{
			"Deployment shop/web (InProgress): pod web-",
			"cannot be scheduled: 0/3 nodes are available",
			"node autoscaler: pod didn't fit any node pool",
			"rollback  release shop: to revision 3",
			"rolled back to revision 3 (recorded as revision 5)",
		} {
			if !strings.Contains(out, want) {
				t.Fatalf("want %q in:\n%s", want, out)
			}
		}
		if took > timeout+20*time.Second {
			t.Fatalf("failing deploy took %s with --timeout %s", took, timeout)
		}
		if err := deploymentReady(cs, "shop", "web", 10, "1"); err != nil {
			t.Fatalf("after the rollback: %v", err)
		}
		if got := statuses(releases(t, e, "--cluster", "apps"), "shop"); got != "1:superseded 2:superseded 3:superseded 4:failed 5:deployed" {
			t.Fatalf("revisions: %s", got)
		}
		t.Logf("failing deploy with --timeout %s returned after %s (rollback included)", timeout, took)
	})

	t.Run("a failed Job fails the deploy", func(t *testing.T) {
		e := e.For(t)
		job := writeSource(t, map[string]string{"job.yaml": `apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  namespace: jobs
spec:
  activeDeadlineSeconds: 2
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {disk: none}
      containers:
      - name: migrate
        image: registry.local/migrate:1
`})
		out := e.RunFail("deploy", "-f", job, "--cluster", "apps", "--name", "migrate", "--timeout", "60s")
		if !strings.Contains(out, "job migrate failed: DeadlineExceeded") {
			t.Fatalf("want the Job's failure in:\n%s", out)
		}
	})

	t.Run("a first deploy that fails with --rollback-on-failure removes what it created", func(t *testing.T) {
		e := e.For(t)
		// A ConfigMap made by hand before: the deploy adopts it, the
		// removal leaves it (it was not the deploy's to delete).
		handmade := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "handmade", Namespace: "default"}, Data: map[string]string{"mode": "by hand"}}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(), handmade, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		src := writeSource(t, map[string]string{"app.yaml": `apiVersion: v1
kind: Namespace
metadata:
  name: firsttry
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: firsttry
data:
  mode: new
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: handmade
  namespace: default
data:
  mode: from fke
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: firsttry
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {fke.dev/no-such-node: "true"}
      containers:
      - name: web
        image: registry.local/web:1
`})
		out := e.RunFail("deploy", "-f", src, "--cluster", "apps", "--name", "firsttry", "--timeout", "10s", "--rollback-on-failure")
		for _, want := range []string{
			"Deployment firsttry/web (InProgress): pod web-",
			"rollback  release firsttry: no healthy revision to return to: removing what this deploy created",
			"pruned    Deployment firsttry/web",
			"no healthy revision to return to: removed the 3 object(s) this deploy created; kept 1 that existed before it, as it left them: ConfigMap default/handmade",
		} {
			if !strings.Contains(out, want) {
				t.Fatalf("want %q in:\n%s", want, out)
			}
		}
		testenv.Eventually(t, 60*time.Second, "namespace firsttry gone", func() error {
			_, err := cs.CoreV1().Namespaces().Get(context.Background(), "firsttry", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("namespace firsttry still there (err %v)", err)
		})
		if _, ok := configMapData(t, cs, "default", "handmade"); !ok {
			t.Fatal("the removal deleted ConfigMap handmade, which existed before the deploy")
		}
		docs := releases(t, e, "--cluster", "apps", "--name", "firsttry")
		if len(docs) != 1 || docs[0].Status != "failed" || !strings.Contains(docs[0].Message, "removed (no healthy revision to return to)") {
			t.Fatalf("revisions of firsttry: %+v", docs)
		}
	})

	t.Run("dry run of a smaller app shows the nodes it frees", func(t *testing.T) {
		e := e.For(t)
		// 10 pods × 1 GPU run on the 2 GPU nodes; v1 has 2 CPU-only pods.
		out := e.MustRun("deploy", "-f", v1, "--cluster", "apps", "--name", "shop", "--prune", "--dry-run")
		for _, want := range []string{
			"pruned    ConfigMap shop/extra",
			"capacity: pool gpu (gpu-h100x8) would no longer need 2 node(s)",
			"dry run: nothing was changed",
		} {
			if !strings.Contains(out, want) {
				t.Fatalf("want %q in:\n%s", want, out)
			}
		}
		if _, ok := configMapData(t, cs, "shop", "extra"); !ok {
			t.Fatal("a dry run with --prune deleted ConfigMap extra")
		}
	})

	t.Run("rollback by command", func(t *testing.T) {
		e := e.For(t)
		out := e.MustRun("rollback", "--cluster", "apps", "--name", "shop", "--to", "1", "--timeout", "60s")
		if !strings.Contains(out, "release shop revision 6: every object is ready") || !strings.Contains(out, "pruned    ConfigMap shop/extra") {
			t.Fatalf("rollback output:\n%s", out)
		}
		if err := deploymentReady(cs, "shop", "web", 2, ""); err != nil {
			t.Fatal(err)
		}
		if mode, ok := configMapData(t, cs, "shop", "settings"); !ok || mode != "v1" {
			t.Fatalf("ConfigMap settings after rollback to 1: %q %v", mode, ok)
		}
		table := e.MustRun("releases", "--cluster", "apps", "--name", "shop")
		if !regexpLine(table, "shop", "6", "deployed", "rollback to 1") {
			t.Fatalf("fke releases does not show the rollback:\n%s", table)
		}
	})

	t.Run("a Helm chart with values and --set", func(t *testing.T) {
		e := e.For(t)
		chart := writeSource(t, map[string]string{
			"Chart.yaml":  "apiVersion: v2\nname: api\nversion: 0.1.0\n",
			"values.yaml": "replicas: 1\nmessage: default\n",
			"templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: {{ .Release.Name }}}}
  template:
    metadata: {labels: {app: {{ .Release.Name }}}}
    spec:
      containers:
      - name: api
        image: registry.local/api:1
        env: [{name: MESSAGE, value: {{ .Values.message | quote }}}]
`,
		})
		values := writeSource(t, map[string]string{"prod.yaml": "message: from-values\n"})
		e.MustRun("deploy", "-f", chart, "--cluster", "apps", "--name", "api", "-n", "charts",
			"--values", filepath.Join(values, "prod.yaml"), "--set", "replicas=3", "--timeout", "60s")
		if err := deploymentReady(cs, "charts", "api", 3, ""); err != nil {
			t.Fatal(err)
		}
		d, err := cs.AppsV1().Deployments("charts").Get(context.Background(), "api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if env := d.Spec.Template.Spec.Containers[0].Env; len(env) != 1 || env[0].Value != "from-values" {
			t.Fatalf("env %v, want MESSAGE=from-values", env)
		}
		if m := d.ManagedFields; len(m) == 0 || m[0].Manager != "fke" || m[0].Operation != metav1.ManagedFieldsOperationApply {
			t.Fatalf("managed fields %v: want a server-side apply by fke", m)
		}
	})

	t.Run("a kustomization", func(t *testing.T) {
		e := e.For(t)
		kust := writeSource(t, map[string]string{
			"base/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: base\n",
			"base/kustomization.yaml": "resources:\n- cm.yaml\n",
			"kustomization.yaml":      "namespace: kust\nnamePrefix: dev-\nresources:\n- ns.yaml\n- base\npatches:\n- patch: |-\n    - op: replace\n      path: /data/mode\n      value: dev\n  target: {kind: ConfigMap}\n",
			"ns.yaml":                 "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kust\n",
		})
		e.MustRun("deploy", "-f", kust, "--cluster", "apps", "--timeout", "60s")
		if mode, ok := configMapData(t, cs, "kust", "dev-settings"); !ok || mode != "dev" {
			t.Fatalf("ConfigMap kust/dev-settings: %q %v, want mode dev", mode, ok)
		}
		// The release is named after the directory when --name is not given.
		docs := releases(t, e, "--cluster", "apps")
		found := false
		for _, d := range docs {
			found = found || d.Release == releaseOf(kust)
		}
		if !found {
			t.Fatalf("no release %s in %v", releaseOf(kust), docs)
		}
	})

	t.Run("a CRD and its objects in one source: CRD first, then the rest", func(t *testing.T) {
		e := e.For(t)
		src := writeSource(t, map[string]string{"all.yaml": `apiVersion: v1
kind: Namespace
metadata:
  name: widgets
---
apiVersion: example.fke.dev/v1
kind: Widget
metadata:
  name: w1
  namespace: widgets
spec:
  size: 3
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.fke.dev
spec:
  group: example.fke.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
`})
		out := e.MustRun("deploy", "-f", src, "--cluster", "apps", "--name", "widgets", "--dry-run")
		if !strings.Contains(out, "created   Widget widgets/w1") || !strings.Contains(out, "dry run: nothing was changed") {
			t.Fatalf("dry run of a CRD and its object:\n%s", out)
		}
		start := time.Now()
		out = e.MustRun("deploy", "-f", src, "--cluster", "apps", "--name", "widgets", "--timeout", "60s")
		// The status watch of a kind this apply creates may miss the
		// Widget; the re-read every 2 s finds it Current all the same.
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("a CRD and its object took %s to be ready (--timeout 60s):\n%s", took, out)
		}
		crd, widget := strings.Index(out, "ready     CustomResourceDefinition widgets.example.fke.dev"), strings.Index(out, "applied   Widget widgets/w1")
		if crd < 0 || widget < 0 || widget < crd {
			t.Fatalf("want the CRD ready before the Widget is applied:\n%s", out)
		}
	})

	t.Run("a CI runner with only a kubeconfig", func(t *testing.T) {
		e := e.For(t)
		kc := filepath.Join(t.TempDir(), "apps.kubeconfig")
		if err := os.WriteFile(kc, []byte(e.MustRun("kubeconfig", "apps")), 0o600); err != nil {
			t.Fatal(err)
		}
		// No management plane in this data directory.
		run := func(args ...string) (string, error) {
			cmd := exec.Command(e.Fke, append([]string{"--data-dir", t.TempDir()}, args...)...)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		v4 := writeSource(t, map[string]string{"app.yaml": shopApp("settings", "v4", 2, 0)})
		out, err := run("deploy", "-f", v4, "--kubeconfig", kc, "--name", "shop", "--dry-run")
		if err != nil || !strings.Contains(out, "capacity preview skipped: it needs the management plane") || !strings.Contains(out, "+  mode: v4") {
			t.Fatalf("dry run with a kubeconfig: %v\n%s", err, out)
		}
		out, err = run("deploy", "-f", v4, "--kubeconfig", kc, "--name", "shop", "--timeout", "60s", "-o", "json")
		var doc struct {
			Ready    bool `json:"ready"`
			Revision int  `json:"revision"`
		}
		if err != nil || json.Unmarshal([]byte(out), &doc) != nil || !doc.Ready || doc.Revision != 7 {
			t.Fatalf("deploy with a kubeconfig: %v\n%s", err, out)
		}
		if mode, _ := configMapData(t, cs, "shop", "settings"); mode != "v4" {
			t.Fatalf("ConfigMap settings mode %q, want v4", mode)
		}
	})
}

// releaseOf is the release name fke deploy gives a directory.
func releaseOf(dir string) string {
	return strings.ToLower(filepath.Base(dir))
}
