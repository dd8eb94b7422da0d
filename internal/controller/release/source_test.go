package release

import (
	"encoding/pem"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/deploy/sourcetest"
)

// gitRepo commits files (name → content; "->target" makes a symbolic
// link) to a new repository at dir with the git command.
func gitRepo(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	sourcetest.WriteTree(t, dir, files)
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "-A"},
		{"-c", "user.name=fke", "-c", "user.email=fke@example.com", "commit", "-q", "-m", "app"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
}

// TestReleaseSourceStaysInRepository fetches a repository whose paths
// lead out of it in every way a Release can name one — valuesFiles, the
// path, a kustomization's resources and patches, a chart's and a
// manifest's links, each by "..", an absolute path or a link — over
// file:// and over https (git's own HTTP backend), and wants each refused
// with SourceReady False, reason PathOutsideSource, the field named in the
// message, and no revision taken; the file outside is never rendered.
func TestReleaseSourceStaysInRepository(t *testing.T) {
	gitPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skip("git is not installed: the test commits links and serves the repository with it")
	}
	outside := t.TempDir()
	secret := filepath.Join(outside, "management.kubeconfig")
	if err := os.WriteFile(secret, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stolen\nreplicas: 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	top := t.TempDir()
	repoDir := filepath.Join(top, "app")
	chart := map[string]string{"Chart.yaml": "apiVersion: v2\nname: app\nversion: 0.1.0\n", "values.yaml": "replicas: 1\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  replicas: \"{{ .Values.replicas }}\"\n"}
	files := map[string]string{
		"values-link.yaml":                  "->" + secret,
		"kust-up/kustomization.yaml":        "resources:\n- ../../../management.kubeconfig\n",
		"kust-patch/kustomization.yaml":     "resources:\n- cm.yaml\npatches:\n- path: p.yaml\n",
		"kust-patch/cm.yaml":                chart["templates/cm.yaml"],
		"kust-patch/p.yaml":                 "->../../../" + filepath.Base(outside) + "/management.kubeconfig",
		"manifests-link/leak.yaml":          "->" + secret,
		"chart-link/templates/kubecfg.yaml": "->" + secret,
	}
	for name, content := range chart {
		files["chart/"+name] = content
		files["chart-link/"+name] = content
	}
	gitRepo(t, repoDir, files)
	// The relative link above is written for this layout: outside and top
	// are siblings in the test's temporary directory.
	if filepath.Dir(outside) != filepath.Dir(top) {
		t.Fatalf("temporary directories %s and %s are not siblings", outside, top)
	}

	backend := filepath.Join(strings.TrimSpace(string(gitPath)), "git-http-backend")
	srv := httptest.NewTLSServer(&cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + top, "GIT_HTTP_EXPORT_ALL=1"}})
	defer srv.Close()
	ca := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "git"},
		Data: map[string][]byte{"ca.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}}

	sources := map[string]fkev1.ReleaseSource{
		"file":  {URL: "file://" + repoDir},
		"https": {URL: srv.URL + "/app/.git", SecretRef: &fkev1.LocalObjectReference{Name: "git"}},
	}
	tests := []struct {
		name        string
		path        string
		valuesFiles []string
		// field the refusal names; "" for a source that renders.
		field string
	}{
		{name: "values file above the repository", path: "chart", valuesFiles: []string{"../../" + filepath.Base(outside) + "/management.kubeconfig"}, field: "valuesFiles[0]"},
		{name: "values file by absolute path", path: "chart", valuesFiles: []string{secret}, field: "valuesFiles[0]"},
		{name: "values file linked out", path: "chart", valuesFiles: []string{"chart/values.yaml", "values-link.yaml"}, field: "valuesFiles[1]"},
		{name: "path above the repository", path: "../..", field: "path"},
		{name: "path by absolute path", path: outside, field: "path"},
		{name: "kustomization resource above the repository", path: "kust-up", field: "kust-up/kustomization.yaml: resources[0]"},
		{name: "kustomization patch linked out", path: "kust-patch", field: "kust-patch/kustomization.yaml: patches[0].path"},
		{name: "manifest linked out", path: "manifests-link", field: "manifests-link/leak.yaml"},
		{name: "chart template linked out", path: "chart-link", field: "chart chart-link"},
		{name: "chart with its values files in the repository", path: "chart", valuesFiles: []string{"chart/values.yaml"}},
	}
	for proto, source := range sources {
		for _, tt := range tests {
			t.Run(proto+"/"+tt.name, func(t *testing.T) {
				r := &Reconciler{
					Client:   fake.NewClientBuilder().WithObjects(ca.DeepCopy()).Build(),
					Recorder: events.NewFakeRecorder(10),
					CacheDir: t.TempDir(),
				}
				rel := testRelease()
				rel.Spec.Source = source
				rel.Spec.Source.Path, rel.Spec.Source.ValuesFiles = tt.path, tt.valuesFiles
				rel.Spec.Stages = rel.Spec.Stages[:1]
				r.fetch(t.Context(), rel, time.Now())
				c := meta.FindStatusCondition(rel.Status.Conditions, fkev1.ConditionSourceReady)
				if c == nil {
					t.Fatal("no SourceReady condition")
				}
				if tt.field == "" {
					if c.Status != metav1.ConditionTrue || rel.Status.Revision == "" {
						t.Fatalf("SourceReady %s %s: %s; revision %q", c.Status, c.Reason, c.Message, rel.Status.Revision)
					}
					return
				}
				if c.Status != metav1.ConditionFalse || c.Reason != fkev1.ReasonPathOutsideSource || !strings.Contains(c.Message, tt.field+":") {
					t.Fatalf("SourceReady %s %s: %s; want False %s naming %s", c.Status, c.Reason, c.Message, fkev1.ReasonPathOutsideSource, tt.field)
				}
				if rel.Status.Revision != "" {
					t.Errorf("revision %s taken", rel.Status.Revision)
				}
				if strings.Contains(c.Message, "stolen") {
					t.Errorf("the message shows the outside file: %s", c.Message)
				}
			})
		}
	}
}
