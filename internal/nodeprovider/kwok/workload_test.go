package kwok

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/nodeprovider"
)

// fakeWorkloads records what the provider asks of the hosted runtime.
type fakeWorkloads struct {
	mu      sync.Mutex
	runs    []map[string][]byte
	args    [][]string
	stopped []string
}

func (f *fakeWorkloads) RunKwok(_ context.Context, _ string, files map[string][]byte, args []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs, f.args = append(f.runs, files), append(f.args, args)
	return nil
}

func (f *fakeWorkloads) StopKwok(_ context.Context, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, key)
	return nil
}

// hostedCluster's API server does not answer: the provider's own calls
// (Leases, Nodes) fail, what it asks of the runtime is what is checked.
func hostedCluster(host string) nodeprovider.Cluster {
	return nodeprovider.Cluster{Key: "team/h", Name: "h", PodCIDR: "10.200.0.0/16", Hosted: true,
		Config: &rest.Config{Host: host, BearerToken: "admin", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}}
}

// TestHostedClusterRunsKwokAsAWorkload: the kwok of a hosted cluster runs
// in the management cluster, applied once per cluster configuration, with
// its kubeconfig and configuration as files; no process starts here; a
// new configuration (the API server moved) applies it again; releasing the
// cluster removes it.
func TestHostedClusterRunsKwokAsAWorkload(t *testing.T) {
	w := &fakeWorkloads{}
	p := New(Options{DataDir: t.TempDir(), Workloads: w})
	ctx := context.Background()
	cluster := hostedCluster("https://127.0.0.1:1")
	for range 3 {
		_, _ = p.List(ctx, cluster) // the listing itself fails: nothing answers
	}
	if len(w.runs) != 1 {
		t.Fatalf("kwok applied %d times for one configuration, want 1", len(w.runs))
	}
	if pid := p.Pid(cluster.Key); pid != 0 {
		t.Errorf("a kwok process runs here (pid %d) for a hosted cluster", pid)
	}
	kc, err := clientcmd.Load(w.runs[0][workloadKubeconfig])
	if err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	if c := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]; c == nil || c.Server != "https://127.0.0.1:1" {
		t.Errorf("kubeconfig points at %+v, want the cluster's API server", c)
	}
	if !strings.Contains(string(w.runs[0][workloadConfig]), "10.200.0.0/16") {
		t.Errorf("kwok configuration lacks the pod range:\n%s", w.runs[0][workloadConfig])
	}
	for _, want := range []string{"--kubeconfig=" + controlplane.KwokWorkloadDir + "/" + workloadKubeconfig, "--config=" + controlplane.KwokWorkloadDir + "/" + workloadConfig, "--server-address=0.0.0.0:10247"} {
		if !slices.Contains(w.args[0], want) {
			t.Errorf("args %v lack %s", w.args[0], want)
		}
	}

	moved := hostedCluster("https://127.0.0.1:2")
	_, _ = p.List(ctx, moved)
	if len(w.runs) != 2 {
		t.Errorf("after the API server moved kwok was applied %d times in all, want 2", len(w.runs))
	}
	if err := p.Release(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.stopped, []string{"team/h"}) {
		t.Errorf("released: stopped %v, want [team/h]", w.stopped)
	}
}

// TestHostedClusterWithoutHostedRuntime: a manager that runs no hosted
// runtime says so rather than starting a kwok that cannot reach the nodes' cluster.
func TestHostedClusterWithoutHostedRuntime(t *testing.T) {
	p := New(Options{DataDir: t.TempDir()})
	_, err := p.List(context.Background(), hostedCluster("https://127.0.0.1:1"))
	if err == nil || !strings.Contains(err.Error(), "runs no hosted runtime") {
		t.Fatalf("List = %v, want an error naming the missing hosted runtime", err)
	}
}
