package backup

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
)

// TestSetResultRecordsTheUpload: a failed upload leaves BackupSucceeded
// true (the local snapshot is there) and says why in BackupUploaded and
// an event; status.backups keeps what it knew of the store. A working one
// says where the snapshots are and lists them with both locations.
func TestSetResultRecordsTheUpload(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := fkev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo"}}
	cl.Spec.Backup = &fkev1.ClusterBackup{S3: &fkev1.S3Store{Endpoint: "http://127.0.0.1:9000", Bucket: "b-1", SecretRef: fkev1.LocalObjectReference{Name: "s3"}}}
	cl.Status.Backups = []fkev1.BackupRecord{{Name: "20261201T030000Z", Time: metav1.NewTime(t0), Locations: []fkev1.BackupLocation{fkev1.BackupS3}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cl).WithStatusSubresource(cl).Build()
	dir := t.TempDir()
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, Recorder: rec, Dir: dir}
	// One local snapshot, as take leaves it.
	snap, err := backup.Take(ctx, etcd{}, "e", ClusterDir(dir, "default", "demo"), t0.Add(time.Hour), "uid")
	if err != nil {
		t.Fatal(err)
	}
	get := func() *fkev1.Cluster {
		got := &fkev1.Cluster{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cl), got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	refused := &uploadResult{err: errors.New("listing s3://b-1/fke/default/demo/: the store refused the credentials (SignatureDoesNotMatch)")}
	if err := r.setResult(ctx, get(), "req-1", &snap, nil, refused); err != nil {
		t.Fatal(err)
	}
	got := get()
	if c := meta.FindStatusCondition(got.Status.Conditions, fkev1.ConditionBackupSucceeded); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("BackupSucceeded after a failed upload: %+v", c)
	}
	up := meta.FindStatusCondition(got.Status.Conditions, fkev1.ConditionBackupUploaded)
	if up == nil || up.Status != metav1.ConditionFalse || up.Reason != fkev1.ReasonUploadFailed || !strings.Contains(up.Message, "SignatureDoesNotMatch") || !strings.Contains(up.Message, "tried again with the next snapshot") {
		t.Errorf("BackupUploaded after a failed upload: %+v", up)
	}
	if ev := <-rec.Events; !strings.Contains(ev, "SnapshotTaken") {
		t.Errorf("first event %q", ev)
	}
	if ev := <-rec.Events; !strings.Contains(ev, "Warning UploadFailed") {
		t.Errorf("second event %q, want the failed upload", ev)
	}
	if b := got.Status.Backups; len(b) != 2 || b[0].Name != "20261201T030000Z" || b[0].Locations[0] != fkev1.BackupS3 || b[1].Name != snap.Name || len(b[1].Locations) != 1 {
		t.Errorf("status.backups after a failed upload: %+v", b)
	}

	worked := &uploadResult{where: "s3://b-1 at http://127.0.0.1:9000, folder fke/default/demo/", res: backup.SyncResult{
		Uploaded: []string{snap.Name}, Pruned: []string{"20261201T030000Z"}, Remote: []backup.Snapshot{snap}, Listed: true,
	}}
	if err := r.setResult(ctx, get(), "req-2", &snap, nil, worked); err != nil {
		t.Fatal(err)
	}
	got = get()
	up = meta.FindStatusCondition(got.Status.Conditions, fkev1.ConditionBackupUploaded)
	if up == nil || up.Status != metav1.ConditionTrue || up.Reason != fkev1.ReasonUploaded || !strings.Contains(up.Message, "snapshot "+snap.Name+" uploaded; 1 snapshots in s3://b-1") {
		t.Errorf("BackupUploaded after an upload: %+v", up)
	}
	if b := got.Status.Backups; len(b) != 1 || b[0].Name != snap.Name || len(b[0].Locations) != 2 {
		t.Errorf("status.backups after an upload: %+v", b)
	}

	// The store taken out of the spec: its condition and records go.
	noStore := get()
	noStore.Spec.Backup.S3 = nil
	if err := r.setResult(ctx, noStore, "req-3", &snap, nil, nil); err != nil {
		t.Fatal(err)
	}
	got = get()
	if c := meta.FindStatusCondition(got.Status.Conditions, fkev1.ConditionBackupUploaded); c != nil {
		t.Errorf("BackupUploaded without a store: %+v", c)
	}
	if b := got.Status.Backups; len(b) != 1 || len(b[0].Locations) != 1 || b[0].Locations[0] != fkev1.BackupLocal {
		t.Errorf("status.backups without a store: %+v", b)
	}
}

// TestSetResultOnAStaleRead: a cluster read before another writer
// changed its status is written again onto the newest one: the snapshot
// is recorded, the other writer's condition stays, and the events are
// sent once.
func TestSetResultOnAStaleRead(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := fkev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cl).WithStatusSubresource(cl).Build()
	dir := t.TempDir()
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, Recorder: rec, Dir: dir}
	snap, err := backup.Take(ctx, etcd{}, "e", ClusterDir(dir, "default", "demo"), time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC), "uid")
	if err != nil {
		t.Fatal(err)
	}
	stale := &fkev1.Cluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cl), stale); err != nil {
		t.Fatal(err)
	}
	// Another writer (the cluster controller) ends an upgrade meanwhile.
	newer := stale.DeepCopy()
	meta.SetStatusCondition(&newer.Status.Conditions, metav1.Condition{Type: fkev1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: fkev1.ReasonUpgraded, Message: "done"})
	if err := c.Status().Update(ctx, newer); err != nil {
		t.Fatal(err)
	}

	if err := r.setResult(ctx, stale, "req-1", &snap, nil, nil); err != nil {
		t.Fatal(err)
	}
	got := &fkev1.Cluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cl), got); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, fkev1.ConditionUpgrading); c == nil || c.Reason != fkev1.ReasonUpgraded {
		t.Errorf("the other writer's condition after the snapshot's record: %+v", c)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, fkev1.ConditionBackupSucceeded); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("BackupSucceeded: %+v", c)
	}
	if got.Status.BackupRequest != "req-1" || len(got.Status.Backups) != 1 || got.Status.Backups[0].Name != snap.Name {
		t.Errorf("request %q, backups %+v", got.Status.BackupRequest, got.Status.Backups)
	}
	if n := len(rec.Events); n != 1 {
		t.Errorf("%d events, want the snapshot's one", n)
	}
}

// etcd serves a small snapshot.
type etcd struct{}

func (etcd) Status(context.Context, string) (*clientv3.StatusResponse, error) {
	return &clientv3.StatusResponse{Header: &etcdserverpb.ResponseHeader{Revision: 7}}, nil
}

func (etcd) Snapshot(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("etcd data")), nil
}
