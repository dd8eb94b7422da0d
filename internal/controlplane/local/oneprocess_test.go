package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/versions"
	"fke.dev/fke/test/testenv"
)

// TestOneProcessPlane runs a control plane in one fke-kube-plane process:
// every component reports ready in that one process, the controller
// manager and the scheduler act on what the API stores, the first plane
// saves the seed of upstream's default objects and a second plane starts
// from it (same objects, their own identities), a killed process comes
// back with its data, an upgrade is refused with the reason, and Stop
// leaves no process behind.
func TestOneProcessPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane")
	}
	rt, spec, cfg := startPlaneAs(t, testenv.BinDir(t), "default/one", versions.Default, "", false, true)
	ctx := t.Context()
	st := mustStatus(t, rt, spec.Key)
	pid := st.Components[0].PID
	for _, c := range st.Components {
		if !c.Ready || c.PID == 0 || c.PID != pid {
			t.Fatalf("component %s: ready %v, pid %d; want every component ready in pid %d: %+v", c.Name, c.Ready, c.PID, pid, st)
		}
	}
	if n := len(testenv.FindProcs(rt.DataDir(spec.Key) + "/")); n != 1 {
		t.Fatalf("%d processes run with the plane's paths, want 1", n)
	}

	// The controller manager makes the Deployment's pod; the scheduler
	// finds no node for it.
	cs := kubernetes.NewForConfigOrDie(cfg)
	one := int32(1)
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}}}}},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the pod left unscheduled by the scheduler", func() error {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return nil
				}
			}
		}
		return fmt.Errorf("%d pods, none marked unschedulable yet", len(pods.Items))
	})

	// The seed: saved by this plane (the first on an empty datastore),
	// planted into the next one's.
	seed := filepath.Join(filepath.Dir(filepath.Dir(rt.DataDir(spec.Key))), ".seeds", "plane-"+versions.Default+".json")
	testenv.Eventually(t, time.Minute, "the seed saved by the first plane", func() error {
		_, err := os.Stat(seed)
		return err
	})
	// One default object left out of the seed: upstream's hooks, which a
	// seeded plane runs once it is ready, create it.
	const missing = "system-node-critical"
	dropFromSeed(t, seed, "/priorityclasses/"+missing)
	twoSpec, twoCfg := ensurePlane(t, rt, "default/two", versions.Default, "", false)
	log, err := os.ReadFile(filepath.Join(rt.DataDir(twoSpec.Key), "logs", "plane.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "Seed planted") {
		t.Fatalf("the second plane's log does not say it planted the seed:\n%s", log)
	}
	two := kubernetes.NewForConfigOrDie(twoCfg)
	// Ready without waiting for upstream's hooks, which run behind the
	// plane's own.
	readyz, err := two.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "").DoRaw(ctx)
	if err != nil || !strings.Contains(string(readyz), "[+]poststarthook/fke/seeded-defaults ok") || strings.Contains(string(readyz), "rbac/bootstrap-roles") {
		t.Fatalf("the seeded plane's /readyz: %v\n%s\nwant fke/seeded-defaults in place of upstream's bootstrap hooks", err, readyz)
	}
	testenv.Eventually(t, time.Minute, "the priority class missing from the seed, created by upstream's hook", func() error {
		_, err := two.SchedulingV1().PriorityClasses().Get(ctx, missing, metav1.GetOptions{})
		return err
	})
	for _, name := range []string{"cluster-admin", "system:node", "system:controller:deployment-controller"} {
		a, err := cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := two.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the seeded plane: %v", err)
		}
		if a.UID == b.UID || !equality.Semantic.DeepEqual(a.Rules, b.Rules) {
			t.Fatalf("ClusterRole %s: UIDs %s and %s, rules equal %v; want the same rules under another identity", name, a.UID, b.UID, equality.Semantic.DeepEqual(a.Rules, b.Rules))
		}
	}
	count := func(cs kubernetes.Interface) (int, int) {
		t.Helper()
		crs, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pcs, err := cs.SchedulingV1().PriorityClasses().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(crs.Items), len(pcs.Items)
	}
	b1, p1 := count(cs)
	if b2, p2 := count(two); b1 != b2 || p1 != p2 {
		t.Fatalf("cluster role bindings %d and %d, priority classes %d and %d: want the same", b1, b2, p1, p2)
	}
	if err := rt.Stop(ctx, twoSpec.Key); err != nil {
		t.Fatal(err)
	}

	older := spec
	older.Version = versions.Previous
	if err := rt.Upgrade(ctx, older, controlplane.APIServer); err == nil || !strings.Contains(err.Error(), "one process") {
		t.Fatalf("Upgrade of a one-process plane: %v, want it refused for that reason", err)
	}

	// Killed, it is started again, with its data.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "the plane back in a new process", func() error {
		st := mustStatus(t, rt, spec.Key)
		if !st.Ready() || st.Components[0].PID == pid {
			return fmt.Errorf("not yet: %+v", st)
		}
		return nil
	})
	if _, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("after the restart: %v", err)
	}

	if err := rt.Stop(context.Background(), spec.Key); err != nil {
		t.Fatal(err)
	}
	if n := len(testenv.FindProcs(rt.DataDir(spec.Key) + "/")); n != 0 {
		t.Fatalf("%d processes left after Stop", n)
	}
}

// dropFromSeed rewrites the seed file at path without the object whose
// etcd key ends in suffix, and fails when there is none.
func dropFromSeed(t *testing.T, path, suffix string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var seed struct {
		Version string `json:"version"`
		Objects []struct {
			Key   string `json:"key"`
			Value []byte `json:"value"`
		} `json:"objects"`
	}
	if err := json.Unmarshal(data, &seed); err != nil {
		t.Fatal(err)
	}
	kept := seed.Objects[:0]
	for _, o := range seed.Objects {
		if !strings.HasSuffix(o.Key, suffix) {
			kept = append(kept, o)
		}
	}
	if len(kept) != len(seed.Objects)-1 {
		t.Fatalf("the seed holds %d objects ending in %s, want 1", len(seed.Objects)-len(kept), suffix)
	}
	seed.Objects = kept
	if data, err = json.Marshal(seed); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
