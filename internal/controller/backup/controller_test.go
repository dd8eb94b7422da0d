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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/controlplane"
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

// TestWanted: a request not yet answered is taken at once; a schedule
// is followed from the last snapshot (or the cluster's creation); an
// invalid schedule is an error.
func TestWanted(t *testing.T) {
	created := time.Date(2026, 12, 1, 2, 30, 0, 0, time.UTC)
	last := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		requested string
		answered  string
		schedule  string
		last      time.Time
		now       time.Time
		take      bool
		after     time.Duration
		err       bool
	}{
		{name: "nothing asked", now: last},
		{name: "a new request", requested: "r2", answered: "r1", now: last, take: true},
		{name: "a request answered", requested: "r2", answered: "r2", now: last},
		{name: "a request answered, a schedule not due", requested: "r2", answered: "r2", schedule: "@hourly", last: last, now: last.Add(20 * time.Minute), after: 40 * time.Minute},
		{name: "due on the schedule", schedule: "@hourly", last: last, now: last.Add(time.Hour), take: true},
		{name: "first one due after creation", schedule: "0 3 * * *", now: last.Add(time.Second), take: true},
		{name: "first one not yet due", schedule: "0 3 * * *", now: created.Add(time.Minute), after: 29 * time.Minute},
		{name: "an invalid schedule", schedule: "every day", now: last, err: true},
		{name: "a request despite an invalid schedule", requested: "r1", schedule: "every day", now: last, take: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
			if tc.requested != "" {
				cl.Annotations = map[string]string{fkev1.AnnotationBackupRequested: tc.requested}
			}
			cl.Status.BackupRequest = tc.answered
			if tc.schedule != "" {
				cl.Spec.Backup = &fkev1.ClusterBackup{Schedule: tc.schedule}
			}
			if !tc.last.IsZero() {
				cl.Status.Backups = []fkev1.BackupRecord{{Name: "x", Time: metav1.NewTime(tc.last)}}
			}
			take, after, err := wanted(cl, tc.now)
			if take != tc.take || after != tc.after || (err != nil) != tc.err {
				t.Errorf("wanted = %v, %s, %v; want %v, %s, error %v", take, after, err, tc.take, tc.after, tc.err)
			}
		})
	}
}

// TestReconcileTakesOneSnapshotPerRequest: a cache that does not hold
// the controller's own last status write yet does not make it take the
// answered request again; a second request in the same second waits for
// the next one rather than replacing the snapshot of the first (which
// may be in the S3 store already).
func TestReconcileTakesOneSnapshotPerRequest(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := fkev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo", UID: "uid-1",
		Annotations: map[string]string{fkev1.AnnotationBackupRequested: "req-1"}}}
	cl.Spec.Runtime = fkev1.RuntimeLocal
	cl.Status.Conditions = []metav1.Condition{{Type: fkev1.ConditionControlPlaneReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}
	pkiSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fkev1.PKISecretName("demo")}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cl, pkiSecret).WithStatusSubresource(cl).Build()
	now := time.Date(2026, 12, 1, 3, 0, 0, 400_000_000, time.UTC)
	rt := &snapshotRuntime{}
	r := &Reconciler{
		Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Dir: t.TempDir(),
		Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: rt},
		Now:      func() time.Time { return now },
	}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cl)}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if rt.taken != 1 {
		t.Fatalf("%d snapshots for the first request", rt.taken)
	}
	first, err := backup.List(ClusterDir(r.Dir, "default", "demo"))
	if err != nil || len(first) != 1 {
		t.Fatalf("snapshots kept: %+v, %v", first, err)
	}

	// A second request in the same second.
	got := &fkev1.Cluster{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	got.Annotations[fkev1.AnnotationBackupRequested] = "req-2"
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	before := got.DeepCopy() // as a cache may still hold it after the next snapshot
	res, err := r.Reconcile(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != 600*time.Millisecond {
		t.Errorf("a request in the second of the last snapshot is looked at again after %s, want 600ms", res.RequeueAfter)
	}
	if kept, _ := backup.List(ClusterDir(r.Dir, "default", "demo")); len(kept) != 1 || kept[0] != first[0] {
		t.Errorf("the first snapshot was replaced: %+v, was %+v", kept, first)
	}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil || got.Status.BackupRequest != "req-1" {
		t.Errorf("the second request was answered without a snapshot: %q, %v", got.Status.BackupRequest, err)
	}
	now = now.Add(600 * time.Millisecond)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if kept, _ := backup.List(ClusterDir(r.Dir, "default", "demo")); len(kept) != 2 || kept[0] != first[0] {
		t.Errorf("after the next second: %+v", kept)
	}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil || got.Status.BackupRequest != "req-2" {
		t.Errorf("the second request: %q, %v", got.Status.BackupRequest, err)
	}

	// Seconds later, a cache that does not hold that status write yet.
	now = now.Add(2 * time.Second)
	before.ResourceVersion = ""
	r.Client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(before, pkiSecret).WithStatusSubresource(before).Build()
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if rt.taken != 2 {
		t.Errorf("the answered request was taken again from a stale cache (%d snapshots for two requests)", rt.taken)
	}
}

// snapshotRuntime takes snapshots of a small etcd; nothing else of the
// runtime is used.
type snapshotRuntime struct {
	controlplane.Runtime
	taken int
}

func (s *snapshotRuntime) Snapshot(ctx context.Context, _ controlplane.Spec, d backup.Dir, now time.Time, uid string) (backup.Snapshot, error) {
	snap, err := backup.Take(ctx, etcd{}, "e", d, now, uid)
	if err == nil {
		s.taken++
	}
	return snap, err
}
