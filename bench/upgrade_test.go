package bench

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/hostnet"
	localnodes "fke.dev/fke/internal/nodeprovider/local"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/internal/versions"
	"fke.dev/fke/test/testenv"
)

// BenchmarkClusterUpgrade: a cluster on the previous minor with a pool of
// 10 kwok nodes (and, where this host runs local nodes, a pool of 2 local
// nodes) is upgraded with `fke cluster upgrade` while a client reads the
// tenant API every 100 ms: the control-plane upgrade's duration, the
// longest time the API went unanswered, and the time until every node of
// each pool runs the new kubelet (pools replace nodes one at a time,
// maxSurge 1, maxUnavailable 0).
//
//	flock /tmp/fke-localnode.lock go test ./bench -run '^$' -bench ClusterUpgrade -benchtime 1x -v
func BenchmarkClusterUpgrade(b *testing.B) {
	withLocal := localnodes.Unavailable(localnodes.Checks(b.Context(), binaries.Finder{Dir: testenv.BinDir(b)}, hostnet.New(nil, nil))) == nil
	e := testenv.Up(b)
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("up%d", i)
		e.MustRun("cluster", "create", name, "--version", versions.Previous, "--nodepool", "name=kwok,type=cpu-small,replicas=10", "--wait")
		want := 10
		if withLocal {
			e.MustRun("nodepool", "create", name+"/local", "--provider", "local", "--instance-type", "cpu-small", "--replicas", "2", "--wait")
			want += 2
		}
		cs := e.Tenant(name)
		waitNodesAt(b, cs, versions.Previous, want, nil)

		probe, err := testenv.ProbeAPI(e.TenantConfig(name), "/api/v1/namespaces/default", 100*time.Millisecond)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		e.MustRun("cluster", "upgrade", name, "--version", versions.Default)
		cp := time.Since(start)
		pools := map[string]time.Duration{}
		waitNodesAt(b, cs, versions.Default, want, func(pool string) { pools[pool] = time.Since(start) - cp })
		gap, summary := probe.Stop()
		b.Logf("control-plane upgrade %s → %s: %s; longest API gap %s (%s)", versions.Previous, versions.Default, cp.Round(10*time.Millisecond), gap.Round(time.Millisecond), summary)
		for pool, d := range pools {
			b.Logf("pool %s: every node at %s %s after the control plane", pool, versions.Default, d.Round(10*time.Millisecond))
		}
		b.ReportMetric(cp.Seconds(), "cp-upgrade-s")
		b.ReportMetric(gap.Seconds(), "api-gap-s")
		b.ReportMetric(pools["kwok"].Seconds(), "kwok10-s")
		if withLocal {
			b.ReportMetric(pools["local"].Seconds(), "local2-s")
		}
		e.MustRun("cluster", "delete", name, "--wait")
	}
}

// waitNodesAt waits until cs has want Ready nodes, all of whose kubelets
// run version; done, when not nil, is told when every node of a pool does.
func waitNodesAt(b *testing.B, cs kubernetes.Interface, version string, want int, done func(pool string)) {
	seen := map[string]bool{}
	testenv.Eventually(b, 10*time.Minute, fmt.Sprintf("%d Ready nodes at %s", want, version), func() error {
		list, err := cs.CoreV1().Nodes().List(b.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready, behind := 0, map[string]int{}
		pools := map[string]bool{}
		for i := range list.Items {
			n := &list.Items[i]
			pool := n.Labels["fke.dev/nodepool"]
			pools[pool] = true
			if n.Status.NodeInfo.KubeletVersion != version {
				behind[pool]++
				continue
			}
			if nodeutil.NodeReady(n) {
				ready++
			}
		}
		for pool := range pools {
			if behind[pool] == 0 && !seen[pool] && done != nil {
				seen[pool] = true
				done(pool)
			}
		}
		if ready != want || len(list.Items) != want {
			return fmt.Errorf("%d nodes, %d Ready at %s", len(list.Items), ready, version)
		}
		return nil
	})
}
