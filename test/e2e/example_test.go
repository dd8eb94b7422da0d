package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/internal/managementplane"
	"fke.dev/fke/test/testenv"
)

// TestModelServingExample runs examples/model-serving as its README says,
// on kwok nodes: the CI script (what the GitHub workflow runs) deploys the
// dev overlay and the prod overlay with a kubeconfig only, then the
// example's Release, applied with kubectl, takes the app over from a git
// repository holding the example and promotes it from dev to prod.
func TestModelServingExample(t *testing.T) {
	t.Parallel() // its time is mostly waits: it runs beside another such test
	e := testenv.Up(t)
	e.MustRun("cluster", "create", "dev", "--wait", "--metrics-server=false", "--nodepool", "name=cpu,type=cpu-medium,replicas=1")
	e.MustRun("cluster", "create", "prod", "--wait", "--metrics-server=false",
		"--nodepool", "name=cpu,type=cpu-medium,replicas=1", "--nodepool", "name=gpu,type=gpu-h100x8,min=0,max=4")
	dev, prod := e.Tenant("dev"), e.Tenant("prod")
	example := filepath.Join(testenv.RepoRoot(), "examples", "model-serving")

	ciDeploy := func(t *testing.T, cluster, overlay string) string {
		t.Helper()
		cmd := exec.Command("ci/deploy.sh", overlay)
		cmd.Dir = example
		cmd.Env = append(os.Environ(), "KUBECONFIG_DATA="+e.MustRun("kubeconfig", cluster), "DEPLOY_TIMEOUT=2m",
			"PATH="+filepath.Dir(e.Fke)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ci/deploy.sh %s: %v\n%s", overlay, err, out)
		}
		return string(out)
	}

	t.Run("CI deploys dev: one CPU-only replica", func(t *testing.T) {
		start := time.Now()
		out := ciDeploy(t, "dev", "overlays/dev")
		t.Logf("ci/deploy.sh overlays/dev: %s", time.Since(start).Round(10*time.Millisecond))
		if !strings.Contains(out, "every object is ready") {
			t.Fatalf("deploy output:\n%s", out)
		}
		if err := serving(dev, "model-serving-dev", 1, false); err != nil {
			t.Fatal(err)
		}
		if _, err := dev.AutoscalingV2().HorizontalPodAutoscalers("model-serving-dev").Get(context.Background(), "model-server", metav1.GetOptions{}); err == nil {
			t.Fatal("dev has an HPA; the overlay removes it")
		}
	})

	t.Run("CI deploys prod: GPU replicas on the GPU pool, 2 by the HPA's minimum", func(t *testing.T) {
		start := time.Now()
		ciDeploy(t, "prod", "overlays/prod")
		testenv.Eventually(t, 2*time.Minute, "2 GPU replicas", func() error { return serving(prod, "model-serving", 2, true) })
		t.Logf("ci/deploy.sh overlays/prod to 2 GPU replicas on a pool grown from zero: %s", time.Since(start).Round(10*time.Millisecond))
		for _, kind := range []string{"pdb", "hpa", "svc"} {
			var err error
			switch kind {
			case "pdb":
				_, err = prod.PolicyV1().PodDisruptionBudgets("model-serving").Get(context.Background(), "model-server", metav1.GetOptions{})
			case "hpa":
				_, err = prod.AutoscalingV2().HorizontalPodAutoscalers("model-serving").Get(context.Background(), "model-server", metav1.GetOptions{})
			case "svc":
				_, err = prod.CoreV1().Services("model-serving").Get(context.Background(), "model-server", metav1.GetOptions{})
			}
			if err != nil {
				t.Errorf("%s: %v", kind, err)
			}
		}
	})

	t.Run("the Release takes over and promotes dev to prod", func(t *testing.T) {
		e := e.For(t)
		repo := testenv.NewGitRepo(t)
		files := map[string]string{}
		err := filepath.WalkDir(example, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			rel, _ := filepath.Rel(example, p)
			files[rel] = string(data)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		commit := repo.Commit(t, "model-serving", files)
		manifest := strings.NewReplacer("file:///srv/git/model-serving", repo.URL(), "soak: 10m", "soak: 5s", "interval: 1m", "interval: 2s").Replace(files["release.yaml"])
		path := filepath.Join(t.TempDir(), "release.yaml")
		if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		kubectl := exec.Command(filepath.Join(e.BinDir, "kubectl"), "--kubeconfig", managementplane.Paths{Dir: e.DataDir}.Kubeconfig(), "apply", "-f", path)
		if out, err := kubectl.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
		c := e.Client()
		start := time.Now()
		testenv.Eventually(t, 2*time.Minute, "dev and prod run the commit", func() error {
			rel := getRelease(t, c, "model-serving")
			if err := stageRuns(rel, "dev", commit); err != nil {
				return err
			}
			return stageRuns(rel, "prod", commit)
		})
		t.Logf("Release: dev and prod Current at the commit after %s (soak 5s)", time.Since(start).Round(10*time.Millisecond))
		out := e.MustRun("releases", "--cluster", "prod", "--name", "model-serving")
		if !strings.Contains(out, commit[:12]+":overlays/prod") {
			t.Errorf("fke releases --cluster prod does not show the Release's revision:\n%s", out)
		}
		if err := serving(prod, "model-serving", 2, true); err != nil {
			t.Error(err)
		}
	})
}

// serving checks the model server in ns: replicas available, and on GPU
// nodes asking for a GPU each (or on CPU nodes asking for none).
func serving(cs kubernetes.Interface, ns string, replicas int32, gpu bool) error {
	ctx := context.Background()
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, "model-server", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if d.Status.AvailableReplicas != replicas {
		return fmt.Errorf("%s/model-server: %d available, want %d", ns, d.Status.AvailableReplicas, replicas)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=model-server"})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, asks := p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]
		if onGPU := n.Labels["fke.dev/nodepool"] == "gpu"; onGPU != gpu || asks != gpu {
			return fmt.Errorf("pod %s on node %s (pool %s) asks for a GPU: %v; want GPU %v", p.Name, n.Name, n.Labels["fke.dev/nodepool"], asks, gpu)
		}
	}
	return nil
}
