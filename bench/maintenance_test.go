package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeprovider/kwok"
	"fke.dev/fke/test/s3server"
	"fke.dev/fke/test/testenv"
)

// BenchmarkBackupRestore: an etcd snapshot of a tenant holding 10,000
// ConfigMaps, and a new cluster restored from it until its API serves them.
//
//	go test ./bench -run '^$' -bench BackupRestore -benchtime 1x -v
func BenchmarkBackupRestore(b *testing.B) {
	e := testenv.Up(b)
	ctx := context.Background()
	e.MustRun("cluster", "create", "big", "--wait")
	cfg := e.TenantConfig("big")
	cfg.QPS, cfg.Burst = 1000, 2000 // client-go's default 5/s would take half an hour
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	const objects = 10000
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= objects {
					return
				}
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i)}, Data: map[string]string{"v": fmt.Sprint(i)}}
				if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		e.MustRun("cluster", "backup", "big")
		snapTime := time.Since(start)
		var records []fkev1.BackupRecord
		if err := json.Unmarshal([]byte(e.MustRun("cluster", "backups", "big", "-o", "json")), &records); err != nil || len(records) == 0 {
			b.Fatalf("backups: %v", err)
		}
		last := records[len(records)-1]
		name := fmt.Sprintf("copy-%d", i)
		start = time.Now()
		e.MustRun("cluster", "restore", name, "--from", "big/"+last.Name, "--wait")
		ready := time.Since(start)
		list, err := e.Tenant(name).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil || len(list.Items) < objects {
			b.Fatalf("restored cluster lists %d ConfigMaps (%v)", len(list.Items), err)
		}
		b.ReportMetric(snapTime.Seconds(), "s-snapshot")
		b.ReportMetric(float64(last.Size)/1e6, "MB-snapshot")
		b.ReportMetric(ready.Seconds(), "s-restore-ready")
		b.Logf("%d ConfigMaps: snapshot %s (%.1f MB, CLI request to recorded), restore -> Ready %s", objects, snapTime.Round(time.Millisecond), float64(last.Size)/1e6, ready.Round(time.Millisecond))

		s3Snap, s3Ready := backupRestoreS3(b, e, "big", fmt.Sprintf("s3-copy-%d", i))
		b.ReportMetric(s3Snap.Seconds(), "s-snapshot-s3")
		b.ReportMetric(s3Ready.Seconds(), "s-restore-s3-ready")
		b.Logf("with an S3 store on loopback: snapshot and upload %s, restore from the store (local copy removed) -> Ready %s", s3Snap.Round(time.Millisecond), s3Ready.Round(time.Millisecond))
	}
}

// backupRestoreS3 turns on an S3 store (test/s3server on loopback) for
// cluster src, and measures `fke cluster backup` (the snapshot and its
// upload) and a restore from the store into cluster dst once the local
// copy is removed; it turns the store off again.
func backupRestoreS3(b *testing.B, e *testenv.Env, src, dst string) (snapshot, restore time.Duration) {
	ctx := context.Background()
	srv := s3server.Start(b, "bench")
	if err := e.Client().Create(ctx, srv.Secret("default", "s3-"+dst, srv.SecretAccessKey)); err != nil {
		b.Fatal(err)
	}
	cl := e.Cluster(src)
	patch := client.MergeFrom(cl.DeepCopy())
	cl.Spec.Backup = &fkev1.ClusterBackup{S3: srv.Store("bench", "s3-"+dst)}
	if err := e.Client().Patch(ctx, cl, patch); err != nil {
		b.Fatal(err)
	}
	defer func() {
		cl := e.Cluster(src)
		patch := client.MergeFrom(cl.DeepCopy())
		cl.Spec.Backup = nil
		if err := e.Client().Patch(ctx, cl, patch); err != nil {
			b.Error(err)
		}
	}()
	start := time.Now()
	e.MustRun("cluster", "backup", src)
	snapshot = time.Since(start)
	var records []fkev1.BackupRecord
	if err := json.Unmarshal([]byte(e.MustRun("cluster", "backups", src, "-o", "json")), &records); err != nil || len(records) == 0 {
		b.Fatalf("backups: %v", err)
	}
	last := records[len(records)-1].Name
	for _, ext := range []string{".db", ".json"} {
		if err := os.Remove(filepath.Join(e.DataDir, "backups", "default", src, last+ext)); err != nil {
			b.Fatal(err)
		}
	}
	start = time.Now()
	e.MustRun("cluster", "restore", dst, "--from", src+"/"+last, "--wait")
	restore = time.Since(start)
	list, err := e.Tenant(dst).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil || len(list.Items) < 10000 {
		b.Fatalf("the cluster restored from the store lists %d ConfigMaps (%v)", len(list.Items), err)
	}
	return snapshot, restore
}

// BenchmarkNodeRepairKwok: one of 10 kwok nodes reports NotReady; the time
// until a replacement is Ready, with a 10 s nodeUnhealthyTimeout.
//
//	go test ./bench -run '^$' -bench NodeRepairKwok -benchtime 3x -v
func BenchmarkNodeRepairKwok(b *testing.B) {
	e := testenv.Up(b)
	ctx := context.Background()
	e.MustRun("cluster", "create", "fix", "--wait")
	e.MustRun("nodepool", "create", "fix/cpu", "--instance-type", "cpu-small", "--replicas", "10", "--wait")
	var np fkev1.NodePool
	key := client.ObjectKey{Namespace: "default", Name: fkev1.NodePoolObjectName("fix", "cpu")}
	if err := e.Client().Get(ctx, key, &np); err != nil {
		b.Fatal(err)
	}
	const timeout = 10 * time.Second
	patch := client.MergeFrom(np.DeepCopy())
	np.Spec.Repair.NodeUnhealthyTimeout = &metav1.Duration{Duration: timeout}
	if err := e.Client().Patch(ctx, &np, patch); err != nil {
		b.Fatal(err)
	}
	cs := e.Tenant("fix")
	var took []time.Duration
	for i := 0; i < b.N; i++ {
		nodes := testenv.WaitReadyNodes(b, cs, 10)
		dead := nodes[0]
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{kwok.AnnotationSimulateNotReady: "true"}}})
		start := time.Now()
		if _, err := cs.CoreV1().Nodes().Patch(ctx, dead, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		testenv.Eventually(b, 3*time.Minute, "replaced", func() error {
			now := testenv.ReadyNodes(b, cs)
			if slices.Contains(now, dead) || len(now) != 10 {
				return fmt.Errorf("%d Ready", len(now))
			}
			return nil
		})
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	med := took[len(took)/2]
	b.ReportMetric(med.Seconds(), "s-notready-to-replaced")
	b.ReportMetric((med - timeout).Seconds(), "s-beyond-timeout")
	b.Logf("NotReady -> replacement Ready with a %s timeout: %v", timeout, took)
}
