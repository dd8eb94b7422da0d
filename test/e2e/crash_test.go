package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fke.dev/fke/test/testenv"
)

// TestDaemonCrash: when the fke daemon is killed, every process it started
// (and their children: tenant control planes, kwok) goes with it; `fke up`
// brings the clusters back with their nodes. Deleting a cluster with node
// pools stops its kwok process too.
func TestDaemonCrash(t *testing.T) {
	e := testenv.Up(t)
	e.MustRun("cluster", "create", "demo", "--wait", "--nodepool", "name=gpu,type=gpu-h100x8,replicas=2")
	e.MustRun("nodepool", "scale", "demo/gpu", "--replicas", "2", "--wait")
	clusterDir := filepath.Join(e.DataDir, "clusters", "default", "demo")
	if kw := testenv.FindProcs("kwok", clusterDir); len(kw) != 1 {
		t.Fatalf("want one kwok process for demo, found %v", kw)
	}

	daemon := e.State().PID
	if err := syscall.Kill(daemon, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "no process left after the daemon died", func() error {
		if left := testenv.FindProcs(e.DataDir); len(left) > 0 {
			return fmt.Errorf("still running: %v", left)
		}
		return nil
	})
	if out := e.RunFail("cluster", "list"); !strings.Contains(out, "not running") {
		t.Errorf("after the crash: want 'not running', got %s", out)
	}

	// Back up: same cluster, same nodes.
	e.MustRun("up")
	waitReady(t, e, "demo")
	cs := e.Tenant("demo")
	testenv.Eventually(t, 90*time.Second, "nodes Ready again", func() error {
		list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "fke.dev/nodepool=gpu"})
		if err != nil {
			return err // the control plane is still coming back
		}
		nodes := list.Items
		ready := 0
		for i := range nodes {
			if nodeReady(&nodes[i]) {
				ready++
			}
		}
		if ready != 2 || len(nodes) != 2 {
			return fmt.Errorf("%d of %d nodes ready", ready, len(nodes))
		}
		return nil
	})

	// Deleting the cluster removes its pools, machines and kwok process.
	e.MustRun("cluster", "delete", "demo", "--wait")
	if left := testenv.FindProcs(clusterDir); len(left) > 0 {
		t.Fatalf("processes of the deleted cluster left: %v", left)
	}
	if out := e.MustRun("nodepool", "list"); strings.Contains(out, "gpu-h100x8") {
		t.Fatalf("pool of the deleted cluster still listed:\n%s", out)
	}
}
