package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/test/testenv"
)

// scaleUpNodes is the scale-up the manager is killed in the middle of
// (the case of issue 17: 20 kwok nodes).
const scaleUpNodes = 20

// BenchmarkRecoveryScaleUp kills fke-manager five times in the middle of a
// scale-up of a kwok pool from 0 to 20 nodes (right after the first new node
// registers). It measures the time from SIGKILL until the manager serves
// again, from then until all 20 nodes are Ready (the target: 5 s), and the
// longest time the tenant API went unanswered meanwhile, probed every
// 100 ms (the tenant control plane is held by fke's daemon and serves on
// while the manager is down). Between runs the pool goes back to 0 and its
// nodes are gone.
//
//	go test ./bench -run '^$' -bench RecoveryScaleUp -benchtime 1x -v
func BenchmarkRecoveryScaleUp(b *testing.B) {
	e := testenv.Up(b)
	e.MustRun("cluster", "create", "sup", "--wait", "--nodepool", "name=gpu,type=gpu-h100x8,replicas=0")
	cs := e.Tenant("sup")
	tenant := e.TenantConfig("sup")
	r := &recovery{b: b, e: e, tenant: tenant}
	var back, nodes, gaps []time.Duration
	for i := 0; i < b.N; i++ {
		for range recoveryRuns {
			r.settle()
			e.MustRun("nodepool", "scale", "sup/gpu", "--replicas", fmt.Sprint(scaleUpNodes))
			until(b, time.Minute, "a new node", func() error { return poolNodes(cs, 1, false) })
			probe, err := testenv.ProbeAPI(tenant, "/api/v1/namespaces/default", 100*time.Millisecond)
			if err != nil {
				b.Fatal(err)
			}
			killed := testenv.KillPID(b, r.componentPID("fke-manager"))
			returned := killed.Add(sinceReady(b, killed, e.ManagerReadyz))
			until(b, 2*time.Minute, "all nodes Ready", func() error { return poolNodes(cs, scaleUpNodes, true) })
			gap, summary := probe.Stop()
			back, nodes, gaps = append(back, returned.Sub(killed)), append(nodes, time.Since(returned)), append(gaps, gap)
			b.Logf("manager serving %.2fs after SIGKILL, all %d nodes Ready %.2fs later; tenant API: %s", returned.Sub(killed).Seconds(), scaleUpNodes, time.Since(returned).Seconds(), summary)
			e.MustRun("nodepool", "scale", "sup/gpu", "--replicas", "0")
			until(b, 2*time.Minute, "pool empty", func() error { return poolGone(cs) })
		}
	}
	bm, bx := medianMax(back)
	nm, nx := medianMax(nodes)
	gm, gx := medianMax(gaps)
	b.ReportMetric(nm.Seconds(), "s-nodes-ready-median")
	b.ReportMetric(nx.Seconds(), "s-nodes-ready-max")
	b.ReportMetric(gx.Seconds(), "s-tenant-api-gap-max")
	b.Logf("\n| | median | max | all |\n|---|---|---|---|\n| SIGKILL → fke-manager serving | %.2f s | %.2f s | %s |\n| fke-manager serving → %d nodes Ready | %.2f s | %.2f s | %s |\n| longest tenant API gap (probe every 100 ms) | %.2f s | %.2f s | %s |",
		bm.Seconds(), bx.Seconds(), secs(back), scaleUpNodes, nm.Seconds(), nx.Seconds(), secs(nodes), gm.Seconds(), gx.Seconds(), secs(gaps))
}

// poolNodes reports whether the gpu pool has at least want nodes (Ready
// ones, with ready).
func poolNodes(cs kubernetes.Interface, want int, ready bool) error {
	list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: fkev1.LabelNodePool + "=gpu"})
	if err != nil {
		return err
	}
	n := 0
	var notReady []string
	for i := range list.Items {
		if !ready || nodeutil.NodeReady(&list.Items[i]) {
			n++
		} else {
			notReady = append(notReady, list.Items[i].Name)
		}
	}
	if n < want {
		return fmt.Errorf("%d of %d nodes (not Ready: %s)", n, want, strings.Join(notReady, ", "))
	}
	return nil
}

// poolGone reports whether the gpu pool has no node left.
func poolGone(cs kubernetes.Interface) error {
	list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: fkev1.LabelNodePool + "=gpu"})
	if err != nil {
		return err
	}
	if len(list.Items) > 0 {
		return fmt.Errorf("%d nodes left", len(list.Items))
	}
	return nil
}
