package cluster

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/controlplane"
)

// etcdData serves a small snapshot.
type etcdData struct{}

func (etcdData) Status(context.Context, string) (*clientv3.StatusResponse, error) {
	return &clientv3.StatusResponse{Header: &etcdserverpb.ResponseHeader{Revision: 9}}, nil
}

func (etcdData) Snapshot(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("etcd data")), nil
}

// inPlaceRuntime takes snapshots and records the restores asked of it;
// it has no SetAsideData (the embedded nil Runtime panics if called).
type inPlaceRuntime struct {
	controlplane.Runtime
	restored []string
	spec     controlplane.Spec
}

func (f *inPlaceRuntime) Snapshot(ctx context.Context, _ controlplane.Spec, d backup.Dir, now time.Time, uid string) (backup.Snapshot, error) {
	return backup.Take(ctx, etcdData{}, "e", d, now, uid)
}

func (f *inPlaceRuntime) RestoreInPlace(_ context.Context, spec controlplane.Spec, snapshot string) error {
	f.spec = spec
	f.restored = append(f.restored, snapshot)
	return nil
}

// inPlaceReconciler reconciles cl (hosted) on an inPlaceRuntime; own is
// where cl's snapshots are kept.
func inPlaceReconciler(t *testing.T, cl *fkev1.Cluster) (r *Reconciler, rt *inPlaceRuntime, own backup.Dir) {
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cl).Build()
	dir := t.TempDir()
	rt = &inPlaceRuntime{}
	r = &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10), BackupDir: dir,
		Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeHosted: rt}}
	return r, rt, backup.Dir(filepath.Join(dir, cl.Namespace, cl.Name))
}

// TestRestoreInPlaceKeepsTheDataFirst: on a runtime that replaces the data
// itself (hosted), a restore in place first takes a snapshot of the data it
// replaces, lists it, and hands the runtime the snapshot asked for; the next
// Ensure gets no Spec.Restore (the data is in already).
func TestRestoreInPlaceKeepsTheDataFirst(t *testing.T) {
	ctx := context.Background()
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "h", UID: "uid-h"},
		Spec: fkev1.ClusterSpec{Runtime: fkev1.RuntimeHosted, Datastore: fkev1.DatastoreShared}}
	r, rt, own := inPlaceReconciler(t, cl)
	old, err := backup.Take(ctx, etcdData{}, "e", own, time.Now().Add(-time.Hour), "uid-h")
	if err != nil {
		t.Fatal(err)
	}

	path, kept, err := r.restoreInPlace(ctx, cl, nil, old.Name+"@1")
	if err != nil {
		t.Fatal(err)
	}
	if path != own.File(old.Name) || len(rt.restored) != 1 || rt.restored[0] != path {
		t.Errorf("path %q, runtime asked to restore %v; want %s", path, rt.restored, own.File(old.Name))
	}
	if rt.spec.Key != "default/h" || rt.spec.Datastore != string(fkev1.DatastoreShared) {
		t.Errorf("runtime asked with %+v", rt.spec)
	}
	if kept == "" || kept == old.Name {
		t.Fatalf("kept %q: want a new snapshot of the replaced data", kept)
	}
	if _, err := backup.Verify(own, kept); err != nil {
		t.Errorf("the snapshot of the replaced data: %v", err)
	}
	if n := len(cl.Status.Backups); n != 2 || cl.Status.Backups[1].Name != kept {
		t.Errorf("status.backups %+v: want the old snapshot and the kept one", cl.Status.Backups)
	}
}

// TestRestoreInPlaceOfASnapshotOfThisSecond: the snapshot that keeps the
// replaced data never takes the name (and file) of the snapshot restored,
// even when that one was taken in the same second.
func TestRestoreInPlaceOfASnapshotOfThisSecond(t *testing.T) {
	ctx := context.Background()
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "h", UID: "uid-h"},
		Spec: fkev1.ClusterSpec{Runtime: fkev1.RuntimeHosted}}
	r, _, own := inPlaceReconciler(t, cl)
	asked, err := backup.Take(ctx, etcdBytes("the data asked for"), "e", own, time.Now(), "uid-h")
	if err != nil {
		t.Fatal(err)
	}
	_, kept, err := r.restoreInPlace(ctx, cl, nil, asked.Name+"@1")
	if err != nil {
		t.Fatal(err)
	}
	if kept == asked.Name {
		t.Fatalf("the replaced data was kept as %s, the snapshot restored", kept)
	}
	if got, err := backup.Verify(own, asked.Name); err != nil || got != asked {
		t.Errorf("the snapshot restored, after the restore: %+v, %v; was %+v", got, err, asked)
	}
}

// TestInPlaceRequest: a restore in place asked for and not done is done
// once; one the API server shows done, though the cache does not yet, is
// not done again.
func TestInPlaceRequest(t *testing.T) {
	ctx := context.Background()
	cluster := func(asked, done string) *fkev1.Cluster {
		cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c"}}
		if asked != "" {
			cl.Annotations = map[string]string{fkev1.AnnotationRestoreInPlace: asked}
		}
		cl.Status.RestoreRequest = done
		return cl
	}
	for _, tc := range []struct {
		name          string
		cached, fresh *fkev1.Cluster
		want          string
	}{
		{name: "none asked", cached: cluster("", ""), fresh: cluster("", "")},
		{name: "asked", cached: cluster("s1@1", ""), fresh: cluster("s1@1", ""), want: "s1@1"},
		{name: "asked again", cached: cluster("s1@2", "s1@1"), fresh: cluster("s1@2", "s1@1"), want: "s1@2"},
		{name: "done", cached: cluster("s1@1", "s1@1"), fresh: cluster("s1@1", "s1@1")},
		{name: "done, the cache behind", cached: cluster("s1@1", ""), fresh: cluster("s1@1", "s1@1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{APIReader: fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(tc.fresh).Build()}
			got, err := r.inPlaceRequest(ctx, tc.cached)
			if err != nil || got != tc.want {
				t.Errorf("inPlaceRequest = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// etcdBytes serves a snapshot of its text.
type etcdBytes string

func (etcdBytes) Status(context.Context, string) (*clientv3.StatusResponse, error) {
	return &clientv3.StatusResponse{Header: &etcdserverpb.ResponseHeader{Revision: 3}}, nil
}

func (e etcdBytes) Snapshot(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(string(e))), nil
}
