package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/manager"
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
		e := e.For(t)
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
		e := e.For(t)
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

	t.Run("a manager killed in the middle of an upgrade finishes it once restarted", func(t *testing.T) {
		e := e.For(t)
		upgradeAcrossManagerRestart(t, e, "later", old, cur)
	})
}

// upgradeAcrossManagerRestart upgrades cluster name from old to cur and
// kills fke-manager (SIGKILL) once the API server runs cur and the other
// components do not yet. The daemon starts the manager again; the upgrade
// must then finish where it stopped: every component at cur, the
// Upgrading condition over, one upgrade (same start and snapshot, one
// snapshot taken, the API server upgraded once) and the data intact.
func upgradeAcrossManagerRestart(t *testing.T, e *testenv.Env, name, old, cur string) {
	ctx := context.Background()
	cs := e.Tenant(name)
	for i := range 10 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("restart-%d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	scheme, err := manager.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	wc, err := client.NewWithWatch(e.ManagementConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &fkev1.ClusterList{}, client.InNamespace("default"), client.MatchingFields{"metadata.name": name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	cl := e.Cluster(name)
	patch := client.MergeFrom(cl.DeepCopy())
	cl.Spec.Version = cur // what `fke cluster upgrade` does
	if err := e.Client().Patch(ctx, cl, patch); err != nil {
		t.Fatal(err)
	}
	running := func(cl *fkev1.Cluster, component string) string {
		for _, c := range cl.Status.ControlPlane {
			if c.Name == component {
				return c.Version
			}
		}
		return ""
	}
	var before fkev1.UpgradeStatus
	deadline := time.After(2 * time.Minute)
	for before.To == "" {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch of the cluster ended")
			}
			c, isCluster := ev.Object.(*fkev1.Cluster)
			if !isCluster || c.Status.Upgrade == nil || c.Status.Upgrade.To != cur {
				continue
			}
			if c.Status.Upgrade.CompletionTime != nil {
				t.Fatalf("the upgrade finished before the manager could be killed: %+v", c.Status.Upgrade)
			}
			if running(c, "kube-apiserver") == cur && running(c, "kube-controller-manager") == old {
				before = *c.Status.Upgrade
			}
		case <-deadline:
			t.Fatalf("the API server of %s was not upgraded within 2 minutes: %+v", name, e.Cluster(name).Status)
		}
	}
	killed := testenv.KillPID(t, e.ComponentPID("fke-manager"))
	t.Logf("fke-manager killed at step %s (%s)", before.Step, before.Message)

	var cl2 *fkev1.Cluster
	testenv.Eventually(t, 3*time.Minute, "the upgrade finished after the manager restart", func() error {
		cl2 = e.Cluster(name)
		up := cl2.Status.Upgrade
		if up == nil || up.CompletionTime == nil {
			return fmt.Errorf("upgrade %+v", up)
		}
		for _, c := range cl2.Status.ControlPlane {
			if c.Name != "etcd" && (c.Version != cur || !c.Ready) {
				return fmt.Errorf("%s runs %q (ready %t)", c.Name, c.Version, c.Ready)
			}
		}
		return nil
	})
	t.Logf("FIGURE upgrade finished %.1fs after fke-manager was killed", time.Since(killed).Seconds())
	up := cl2.Status.Upgrade
	if up.From != old || up.To != cur || !up.StartTime.Equal(&before.StartTime) || up.Snapshot != before.Snapshot {
		t.Errorf("status.upgrade %+v is not the upgrade that was under way (%+v)", up, before)
	}
	if c := meta.FindStatusCondition(cl2.Status.Conditions, fkev1.ConditionUpgrading); c == nil || c.Status != metav1.ConditionFalse || c.Reason != fkev1.ReasonUpgraded {
		t.Errorf("Upgrading condition: %+v", c)
	}
	// Each step once: one snapshot, one start, the API server upgraded once.
	if snaps, _ := filepath.Glob(filepath.Join(e.DataDir, "backups", "default", name, "*.db")); len(snaps) != 1 {
		t.Errorf("%d snapshots of %s, want the one taken before the upgrade", len(snaps), name)
	}
	var evs eventsv1.EventList
	if err := e.Client().List(ctx, &evs, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, ev := range evs.Items {
		if ev.Regarding.Name != name {
			continue
		}
		n := 1
		if ev.Series != nil {
			n = int(ev.Series.Count)
		}
		switch {
		case ev.Reason == "UpgradeStarted", ev.Reason == "SnapshotTaken":
			count[ev.Reason] += n
			t.Logf("event %s %s by %s/%s at %s (count %d): %s", ev.Reason, ev.Action, ev.ReportingController, ev.ReportingInstance, ev.EventTime.Format(time.RFC3339Nano), n, ev.Note)
		case ev.Reason == "ComponentUpgraded":
			count[strings.Fields(ev.Note)[0]] += n
		}
	}
	for _, what := range []string{"UpgradeStarted", "SnapshotTaken", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if count[what] != 1 {
			t.Errorf("%s: %d times, want once (events: %v)", what, count[what], count)
		}
	}
	testenv.Eventually(t, time.Minute, "the tenant API serving "+cur, func() error {
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			return err
		}
		if v.GitVersion != cur {
			return fmt.Errorf("the API server reports %s", v.GitVersion)
		}
		return nil
	})
	for i := range 10 {
		cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("restart-%d", i), metav1.GetOptions{})
		if err != nil || cm.Data["i"] != fmt.Sprint(i) {
			t.Errorf("ConfigMap restart-%d after the upgrade: %v, %v", i, cm, err)
		}
	}
}
