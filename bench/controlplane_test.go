// Package bench holds fke's benchmarks; results are recorded in README.md.
package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/test/testenv"
)

// BenchmarkClusterCreate measures the time from `fke cluster create` to the
// tenant kube-apiserver's /readyz answering ok, over 5 clusters, and the
// resident memory of an idle tenant control plane (etcd + kube-apiserver +
// kube-controller-manager + kube-scheduler).
//
//	go test ./bench -run '^$' -bench ClusterCreate -benchtime 1x
func BenchmarkClusterCreate(b *testing.B) {
	e := testenv.Up(b)
	c := e.Client()
	const clusters = 5
	var durations []time.Duration
	for i := 0; i < b.N; i++ {
		for j := 0; j < clusters; j++ {
			name := fmt.Sprintf("bench-%d-%d", i, j)
			start := time.Now()
			e.MustRun("cluster", "create", name)
			waitReadyz(b, c, name)
			durations = append(durations, time.Since(start))
		}
	}
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	median, max := durations[len(durations)/2], durations[len(durations)-1]
	b.ReportMetric(median.Seconds(), "s-median-ready")
	b.ReportMetric(max.Seconds(), "s-max-ready")

	// Idle memory: let the control planes settle, then sum RSS per cluster.
	time.Sleep(15 * time.Second) // a settling period, not a wait for state
	var total, totalAddons float64
	for j := 0; j < clusters; j++ {
		mb, addons := clusterRSSMB(b, e.DataDir, fmt.Sprintf("bench-0-%d", j))
		total += mb
		totalAddons += addons
		b.Logf("cluster bench-0-%d: %.0f MB RSS, addons (metrics-server, gpu-metrics) %.0f MB", j, mb, addons)
	}
	b.ReportMetric(total/clusters, "MB-rss-per-cluster")
	b.ReportMetric(totalAddons/clusters, "MB-rss-addons-per-cluster")
	b.Logf("create→readyz over %d clusters: median %s, max %s; all: %v", len(durations), median, max, durations)
}

// waitReadyz polls until the cluster has ports and its API server's /readyz says ok.
func waitReadyz(b *testing.B, c client.Client, name string) {
	b.Helper()
	httpc := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // anonymous /readyz on loopback
	}}
	deadline := time.Now().Add(60 * time.Second)
	port := int32(0)
	for time.Now().Before(deadline) {
		if port == 0 {
			cl := &fkev1.Cluster{}
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, cl); err == nil {
				port = cl.Status.Ports.APIServer
			}
		}
		if port != 0 {
			resp, err := httpc.Get("https://127.0.0.1:" + strconv.Itoa(int(port)) + "/readyz")
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && string(body) == "ok" {
					return
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("cluster %s: /readyz not ok after 60s", name)
}

// clusterRSSMB sums VmRSS of the processes whose command line names the
// cluster's data directory: the four control-plane components, and apart
// the addon processes beside them (metrics-server, gpu-metrics).
func clusterRSSMB(b *testing.B, dataDir, name string) (controlPlane, addons float64) {
	b.Helper()
	dir := filepath.Join(dataDir, "clusters", "default", name) + "/"
	var cp int
	for _, p := range testenv.FindProcs(dir) {
		if slices.ContainsFunc(p.Args, func(a string) bool { return strings.Contains(a, dir+"addons/") }) {
			addons += rssMB(p.PID)
			continue
		}
		cp++
		controlPlane += rssMB(p.PID)
	}
	if want := testenv.PlaneProcs(b, dir); cp != want {
		b.Fatalf("tenant %s: want %d control-plane processes, found %d", name, want, cp)
	}
	return controlPlane, addons
}

// BenchmarkWarmCreate measures `fke cluster create` → tenant /readyz when a
// standby control plane waits in the warm pool (fke up --warm-pool=1): 10
// sequential creates, each once the pool has refilled, and checks that
// each cluster took a standby plane (its CA is the plane's).
//
//	go test ./bench -run '^$' -bench WarmCreate -benchtime 1x
func BenchmarkWarmCreate(b *testing.B) {
	e := testenv.Up(b, "--warm-pool=1")
	c := e.Client()
	const creates = 10
	var durations []time.Duration
	for i := 0; i < b.N; i++ {
		for j := 0; j < creates; j++ {
			name := fmt.Sprintf("warm-%d-%d", i, j)
			ca := waitStandby(b, e)
			start := time.Now()
			e.MustRun("cluster", "create", name)
			waitReadyz(b, c, name)
			durations = append(durations, time.Since(start))
			secret := &corev1.Secret{}
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: fkev1.PKISecretName(name)}, secret); err != nil {
				b.Fatal(err)
			}
			if !bytes.Equal(secret.Data[pki.CACertFile], ca) {
				b.Fatalf("cluster %s did not take the standby plane", name)
			}
		}
	}
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	p50, p99 := durations[len(durations)/2], durations[len(durations)-1]
	b.ReportMetric(p50.Seconds(), "s-p50-ready")
	b.ReportMetric(p99.Seconds(), "s-p99-ready")
	b.Logf("warm create→readyz over %d clusters: p50 %s, p99 (max of %d) %s; all: %v", len(durations), p50, len(durations), p99, durations)
}

// waitStandby waits until the warm pool holds one ready plane and returns
// its CA.
func waitStandby(b *testing.B, e *testenv.Env) []byte {
	b.Helper()
	var ca []byte
	testenv.Eventually(b, 3*time.Minute, "a ready standby plane", func() error {
		status, err := e.PoolStatus()
		if err != nil {
			return err
		}
		planes, err := e.StandbyPlanes()
		if err != nil {
			return err
		}
		for _, id := range strings.Split(status["readyPlanes"], ",") {
			if planeCA, ok := planes[id]; ok {
				ca = planeCA
				return nil
			}
		}
		return fmt.Errorf("no ready standby plane (ready: %q)", status["readyPlanes"])
	})
	return ca
}
