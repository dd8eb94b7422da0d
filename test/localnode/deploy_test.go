package localnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/test/testenv"
)

// deployment is one replica of img; minReadySeconds makes "available" mean
// "has run for a while", so a container that dies right after it starts is
// never taken for ready.
func deployment(name, img string, args ...string) string {
	argv := ""
	if len(args) > 0 {
		argv = fmt.Sprintf("\n        args: [%q]", strings.Join(args, `", "`))
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: 1
  minReadySeconds: 5
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      containers:
      - name: main
        image: %[2]s%[3]s
`, name, img, argv)
}

// TestDeployOnLocalNodes: fke deploy against a real node, whose kubelet
// really pulls images from fke's registry. An app whose image is there
// becomes ready; one whose image does not exist fails as soon as the
// kubelet has twice said the registry does not have it, long before
// --timeout, and the error says the image cannot be pulled; a crash loop
// (which may yet come right) is waited for until --timeout.
func TestDeployOnLocalNodes(t *testing.T) {
	requireNodeTools(t)
	e := upForLocalNodes(t)
	e.MustRun("cluster", "create", "demo", "--wait", "--metrics-server=false")
	registry := e.WaitSystemImages()
	e.MustRun("nodepool", "create", "demo/cpu", "--provider", "local", "--instance-type", "cpu-small", "--replicas", "1")
	cs := e.Tenant("demo")
	waitReadyLocalNode(t, cs)

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// The demo server: the crash loop below runs the same image, already
	// on the node then, so that its --timeout is spent crashing, not
	// pulling under load.
	good := write("good.yaml", deployment("sleeper", image.DemoServer.Ref(registry)))
	start := time.Now()
	out := e.MustRun("deploy", "-f", good, "--cluster", "demo", "--timeout", "2m")
	if !strings.Contains(out, "ready     Deployment default/sleeper") {
		t.Fatalf("want the Deployment ready in:\n%s", out)
	}
	t.Logf("FIGURE deploy with a real image pull -> Current: %s", time.Since(start).Round(10*time.Millisecond))

	// A missing image is final once the kubelet has said so twice: the
	// deploy ends long before its timeout, with the reason.
	missing := registry + "/fke/does-not-exist:1"
	bad := write("bad.yaml", deployment("broken", missing))
	const pullTimeout = 3 * time.Minute
	start = time.Now()
	out = e.RunFail("deploy", "-f", bad, "--cluster", "demo", "--timeout", pullTimeout.String())
	took := time.Since(start)
	for _, want := range []string{
		"image " + missing + " cannot be pulled (",
		"not found",
		"Deployment default/broken (InProgress)",
		"stopped waiting after",
		"(final: not waiting for the timeout)",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("want %q in:\n%s", want, out)
		}
	}
	if took > pullTimeout/3 {
		t.Fatalf("deploy of a missing image took %s with --timeout %s: want it to end on the pull failure, within a third of that", took, pullTimeout)
	}
	t.Logf("FIGURE deploy of a missing image -> failed with the reason: %s (--timeout %s)", took.Round(10*time.Millisecond), pullTimeout)
	t.Logf("its error:\n%s", out)

	const timeout = 45 * time.Second
	// The demo server exits 2 on a flag it does not know: a crash loop.
	crash := write("crash.yaml", deployment("crasher", image.DemoServer.Ref(registry), "--no-such-flag"))
	start = time.Now()
	out = e.RunFail("deploy", "-f", crash, "--cluster", "demo", "--timeout", timeout.String())
	if took := time.Since(start); took < timeout || strings.Contains(out, "stopped waiting") {
		t.Fatalf("a crash loop may still come right: want the deploy to wait its --timeout %s, it ended after %s:\n%s", timeout, took, out)
	}
	if !strings.Contains(out, "container main is crash-looping (") || !strings.Contains(out, "last exit code 2") || !strings.Contains(out, "Deployment default/crasher (InProgress): pod crasher-") {
		t.Fatalf("want the crash loop with its exit code in:\n%s", out)
	}
	t.Logf("its error:\n%s", out)
}

// waitReadyLocalNode waits until the cluster has a Ready node (the local
// node its test just asked for).
func waitReadyLocalNode(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	testenv.Eventually(t, 3*time.Minute, "a Ready local node", func() error {
		list, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range list.Items {
			if nodeutil.NodeReady(&n) {
				return nil
			}
		}
		return fmt.Errorf("no Ready node among %d", len(list.Items))
	})
}
