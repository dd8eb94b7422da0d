package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/versions"
	"fke.dev/fke/test/testenv"
)

// TestClusterUpgrade creates a cluster on the previous minor with kwok
// nodes and a workload, upgrades it while a client reads the API every
// 100 ms, and checks what a user would: every component and node reports
// the new version, the workload still runs, the data is intact, a snapshot
// was taken first, and the API never went unanswered for long. Skipping a
// minor, downgrading and nodes newer than their control plane are refused.
func TestClusterUpgrade(t *testing.T) {
	e := testenv.Up(t)
	ctx := context.Background()
	old, cur := versions.Previous, versions.Default

	if out := e.MustRun("versions"); !strings.Contains(out, old) || !strings.Contains(out, cur) {
		t.Fatalf("fke versions:\n%s", out)
	}
	e.MustRun("cluster", "create", "up", "--version", old, "--nodepool", "name=cpu,type=cpu-small,replicas=3", "--wait")
	cs := e.Tenant("up")
	if v, err := cs.Discovery().ServerVersion(); err != nil || v.GitVersion != old {
		t.Fatalf("the new cluster's API server reports %v (%v), want %s", v, err, old)
	}
	nodeVersions := func() map[string]string {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, n := range nodes.Items {
			out[n.Name] = n.Status.NodeInfo.KubeletVersion
		}
		return out
	}
	for n, v := range nodeVersions() {
		if v != old {
			t.Errorf("node %s reports kubelet %q, want %s", n, v, old)
		}
	}

	// A workload and data that must survive.
	for i := range 20 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("data-%02d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	available := func() error {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.AvailableReplicas != 3 {
			return fmt.Errorf("%d of 3 replicas available", d.Status.AvailableReplicas)
		}
		return nil
	}
	testenv.Eventually(t, time.Minute, "web available", available)

	t.Run("refused: skipping a minor, downgrading, nodes newer than the control plane", func(t *testing.T) {
		c := e.Client()
		cl := e.Cluster("up")
		cl.Spec.Version = "v1.38.0"
		if err := c.Update(ctx, cl); err == nil || !strings.Contains(err.Error(), "upgrade one minor version at a time") {
			t.Errorf("skipping a minor: %v", err)
		}
		cl = e.Cluster("up")
		cl.Spec.Version = "v1.35.0"
		if err := c.Update(ctx, cl); err == nil || !strings.Contains(err.Error(), "downgrades are not supported") {
			t.Errorf("downgrade: %v", err)
		}
		if out := e.RunFail("cluster", "upgrade", "up", "--version", "v1.38.0"); !strings.Contains(out, "one minor version at a time") {
			t.Errorf("fke cluster upgrade --version v1.38.0:\n%s", out)
		}
		out := e.RunFail("nodepool", "create", "up/newer", "--instance-type", "cpu-small", "--version", cur)
		if !strings.Contains(out, "would be newer than their control plane") {
			t.Errorf("a pool newer than its cluster:\n%s", out)
		}
	})

	probe, err := testenv.ProbeAPI(e.TenantConfig("up"), "/api/v1/namespaces/default/configmaps/data-00", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := e.Run("cluster", "upgrade", "up", "--version", cur)
	took := time.Since(start)
	gap, summary := probe.Stop()
	if err != nil {
		t.Fatalf("fke cluster upgrade: %v\n%s", err, out)
	}
	t.Logf("FIGURE control-plane upgrade %s → %s: %s; API probe every 100 ms: %s", old, cur, took.Round(10*time.Millisecond), summary)
	for _, step := range []string{"etcd snapshot", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "control plane at " + cur} {
		if !strings.Contains(out, step) {
			t.Errorf("the upgrade's progress does not mention %q:\n%s", step, out)
		}
	}
	if gap > 2*time.Second {
		t.Errorf("the API went unanswered for %s during the upgrade (%s)", gap, summary)
	}

	cl := e.Cluster("up")
	for _, c := range cl.Status.ControlPlane {
		if c.Name != "etcd" && c.Version != cur {
			t.Errorf("%s runs %q, want %s", c.Name, c.Version, cur)
		}
	}
	cond := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionUpgrading)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != fkev1.ReasonUpgraded {
		t.Errorf("Upgrading condition: %+v", cond)
	}
	if up := cl.Status.Upgrade; up == nil || up.Snapshot == "" || up.From != old || up.To != cur {
		t.Errorf("status.upgrade: %+v", up)
	} else if backups := e.MustRun("cluster", "backups", "up"); !strings.Contains(backups, up.Snapshot) {
		t.Errorf("the pre-upgrade snapshot %s is not listed:\n%s", up.Snapshot, backups)
	}
	testenv.Eventually(t, 30*time.Second, "reported version", func() error {
		if v := e.Cluster("up").Status.Version; v != cur {
			return fmt.Errorf("status.version %q", v)
		}
		return nil
	})
	if get := e.MustRun("cluster", "get", "up"); !strings.Contains(get, "kube-apiserver "+cur) {
		t.Errorf("fke cluster get does not show the components' versions:\n%s", get)
	}

	// The pool follows: its nodes are replaced, within its surge limits.
	poolStart := time.Now()
	testenv.Eventually(t, 3*time.Minute, "every node at "+cur, func() error {
		got := nodeVersions()
		n := 0
		for name, v := range got {
			if v != cur {
				return fmt.Errorf("node %s at %s", name, v)
			}
			n++
		}
		var pool fkev1.NodePool
		if err := e.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: fkev1.NodePoolObjectName("up", "cpu")}, &pool); err != nil {
			return err
		}
		if n != 3 || pool.Status.ReadyReplicas != 3 {
			return fmt.Errorf("%d nodes, %d ready in the pool", n, pool.Status.ReadyReplicas)
		}
		return nil
	})
	t.Logf("FIGURE node pool upgrade, 3 kwok nodes: %s", time.Since(poolStart).Round(10*time.Millisecond))
	testenv.Eventually(t, time.Minute, "web available after the node upgrade", available)
	list, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cm := range list.Items {
		if strings.HasPrefix(cm.Name, "data-") {
			n++
		}
	}
	if n != 20 {
		t.Errorf("%d of 20 ConfigMaps after the upgrade", n)
	}

	t.Run("automatic upgrades start only inside the maintenance window", func(t *testing.T) {
		now := time.Now().UTC()
		open := now.Add(-10*time.Minute).Format("15:04") + "/1h"
		closed := now.Add(6*time.Hour).Format("15:04") + "/1h"
		e.MustRun("cluster", "create", "auto", "--version", old, "--auto-upgrade", "minor", "--maintenance", open)
		e.MustRun("cluster", "create", "later", "--version", old, "--auto-upgrade", "minor", "--maintenance", closed, "--wait")
		testenv.Eventually(t, 3*time.Minute, "cluster auto upgraded inside its window", func() error {
			cl := e.Cluster("auto")
			if up := cl.Status.Upgrade; cl.Spec.Version != cur || up == nil || up.To != cur || up.CompletionTime == nil {
				return fmt.Errorf("spec.version %s, upgrade %+v", cl.Spec.Version, cl.Status.Upgrade)
			}
			return nil
		})
		if get := e.MustRun("cluster", "get", "auto"); !strings.Contains(get, "AutoUpgrade") {
			t.Errorf("no AutoUpgrade event in fke cluster get:\n%s", get)
		}
		if cl := e.Cluster("later"); cl.Spec.Version != old || cl.Status.Upgrade != nil {
			t.Errorf("cluster later, whose window opens in 6 h, moved: spec.version %s, upgrade %+v", cl.Spec.Version, cl.Status.Upgrade)
		}
	})
}
