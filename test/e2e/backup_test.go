package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/test/s3server"
	"fke.dev/fke/test/testenv"
)

// TestEtcdBackupAndRestore: snapshots on request and on a schedule, a
// cluster restored from one has the snapshot's objects (Secrets readable:
// same keys), and a snapshot that fails its checksum is refused.
func TestEtcdBackupAndRestore(t *testing.T) {
	t.Parallel() // its time is mostly waits: it runs beside another such test
	e := testenv.Up(t)
	ctx := context.Background()
	e.MustRun("cluster", "create", "src", "--wait")
	cs := e.Tenant("src")
	const objects = 100
	for i := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password"}, StringData: map[string]string{"password": "s3cret"}}
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	out := e.MustRun("cluster", "backup", "src")
	t.Logf("FIGURE fke cluster backup (%d objects): %s", objects, time.Since(start).Round(10*time.Millisecond))
	if !strings.Contains(out, "snapshot ") || !strings.Contains(out, "sha256") {
		t.Fatalf("fke cluster backup says:\n%s", out)
	}
	var records []fkev1.BackupRecord
	if err := json.Unmarshal([]byte(e.MustRun("cluster", "backups", "src", "-o", "json")), &records); err != nil || len(records) != 1 {
		t.Fatalf("backups: %v, %v", records, err)
	}
	snap := records[0].Name
	if table := e.MustRun("cluster", "backups", "src"); !strings.Contains(table, snap) {
		t.Errorf("the table does not list %s:\n%s", snap, table)
	}
	// Made after the snapshot: not in a cluster restored from it.
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("a cluster restored from the snapshot has its objects", func(t *testing.T) {
		e := e.For(t)
		start := time.Now()
		e.MustRun("cluster", "restore", "copy", "--from", "src/"+snap, "--wait")
		t.Logf("FIGURE fke cluster restore -> Ready: %s", time.Since(start).Round(10*time.Millisecond))
		cp := e.Tenant("copy")
		list, err := cp.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, cm := range list.Items {
			if strings.HasPrefix(cm.Name, "cm-") {
				n++
			}
		}
		if n != objects {
			t.Errorf("%d of %d ConfigMaps restored", n, objects)
		}
		if _, err := cp.CoreV1().ConfigMaps("default").Get(ctx, "after", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a ConfigMap made after the snapshot: %v", err)
		}
		got, err := cp.CoreV1().Secrets("default").Get(ctx, "db-password", metav1.GetOptions{})
		if err != nil || string(got.Data["password"]) != "s3cret" {
			t.Errorf("the restored Secret: %v, %v", got, err)
		}
	})
	var bad string // a snapshot whose local file is corrupted
	t.Run("a snapshot that fails its checksum is refused", func(t *testing.T) {
		e := e.For(t)
		e.MustRun("cluster", "backup", "src")
		var records []fkev1.BackupRecord
		if err := json.Unmarshal([]byte(e.MustRun("cluster", "backups", "src", "-o", "json")), &records); err != nil || len(records) != 2 {
			t.Fatalf("backups: %v, %v", records, err)
		}
		bad = records[1].Name
		file := filepath.Join(e.DataDir, "backups", "default", "src", bad+".db")
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0xff
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		e.MustRun("cluster", "restore", "bad", "--from", "src/"+bad)
		testenv.Eventually(t, time.Minute, "the restore refused", func() error {
			var cl fkev1.Cluster
			if err := e.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: "bad"}, &cl); err != nil {
				return err
			}
			c := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionReady)
			if c == nil || c.Reason != fkev1.ReasonRestoreFailed || !strings.Contains(c.Message, "checksum") {
				return fmt.Errorf("Ready condition %+v", c)
			}
			if cl.Status.Ports.EtcdClient != 0 && cl.Status.Endpoint != "" {
				return fmt.Errorf("a control plane was started: %s", cl.Status.Endpoint)
			}
			return nil
		})
		if out := e.RunFail("cluster", "restore", "none", "--from", "src/20000101T000000Z"); !strings.Contains(out, "has no snapshot 20000101T000000Z") {
			t.Errorf("a snapshot that does not exist:\n%s", out)
		}
	})
	t.Run("a cluster restored in place, when confirmed, holds the snapshot's objects", func(t *testing.T) {
		e := e.For(t)
		if out := e.RunFail("cluster", "restore", "src", "--from", "src/"+snap, "--in-place"); !strings.Contains(out, "--yes") {
			t.Errorf("an unconfirmed restore in place:\n%s", out)
		}
		start := time.Now()
		e.MustRun("cluster", "restore", "src", "--from", "src/"+snap, "--in-place", "--yes")
		t.Logf("FIGURE fke cluster restore --in-place -> Ready: %s", time.Since(start).Round(10*time.Millisecond))
		testenv.Eventually(t, time.Minute, "the snapshot's objects served", func() error {
			if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "after", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("a ConfigMap made after the snapshot: %v", err)
			}
			got, err := cs.CoreV1().Secrets("default").Get(ctx, "db-password", metav1.GetOptions{})
			if err != nil || string(got.Data["password"]) != "s3cret" {
				return fmt.Errorf("the Secret: %v", err)
			}
			if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("cm-%03d", objects-1), metav1.GetOptions{}); err != nil {
				return err
			}
			return nil
		})
	})
	bucket := s3Bucket(t)
	t.Run("snapshots go to an S3 store too, and restore from there", func(t *testing.T) {
		e := e.For(t)
		bucket.credentials(t, e, bucket.srv.SecretAccessKey)
		var cl fkev1.Cluster
		key := client.ObjectKey{Namespace: "default", Name: "src"}
		if err := e.Client().Get(ctx, key, &cl); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cl.DeepCopy())
		cl.Spec.Backup = &fkev1.ClusterBackup{S3: bucket.srv.Store(bucket.name, "s3-credentials")}
		if err := e.Client().Patch(ctx, &cl, patch); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out := e.MustRun("cluster", "backup", "src")
		t.Logf("FIGURE fke cluster backup to the S3 store (%d objects): %s", objects, time.Since(start).Round(10*time.Millisecond))
		if !strings.Contains(out, "uploaded") || !strings.Contains(out, "s3://"+bucket.name) {
			t.Errorf("fke cluster backup says:\n%s", out)
		}
		var records []fkev1.BackupRecord
		if err := json.Unmarshal([]byte(e.MustRun("cluster", "backups", "src", "-o", "json")), &records); err != nil || len(records) == 0 {
			t.Fatalf("backups: %v, %v", records, err)
		}
		newest := records[len(records)-1]
		if !slices.Equal(newest.Locations, []fkev1.BackupLocation{fkev1.BackupLocal, fkev1.BackupS3}) {
			t.Errorf("snapshot %s is kept in %v, want local and s3", newest.Name, newest.Locations)
		}
		// The bucket holds it, with its checksum: as a user sees it with an S3 client.
		inBucket := bucket.snapshots(t)
		if got := inBucket[newest.Name]; got != newest.SHA256 {
			t.Fatalf("the bucket holds %v; want %s with sha256 %s", inBucket, newest.Name, newest.SHA256)
		}
		// The snapshot corrupted in the subtest before is not uploaded.
		if _, ok := inBucket[bad]; ok {
			t.Errorf("snapshot %s, which fails its checksum, was uploaded", bad)
		}
		if table := e.MustRun("cluster", "backups", "src"); !strings.Contains(table, "WHERE") || !regexpLine(table, newest.Name, "local,s3") {
			t.Errorf("the table does not say where %s is:\n%s", newest.Name, table)
		}

		// Made after the snapshot: not in a cluster restored from it.
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-s3"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		removeLocal(t, e, newest.Name)
		start = time.Now()
		e.MustRun("cluster", "restore", "from-s3", "--from", "src/"+newest.Name, "--wait")
		t.Logf("FIGURE fke cluster restore from the S3 store -> Ready: %s", time.Since(start).Round(10*time.Millisecond))
		waitEvent(t, e, "SnapshotDownloaded", newest.Name)
		fs := e.Tenant("from-s3")
		got, err := fs.CoreV1().Secrets("default").Get(ctx, "db-password", metav1.GetOptions{})
		if err != nil || string(got.Data["password"]) != "s3cret" {
			t.Errorf("the restored Secret: %v, %v", got, err)
		}
		if _, err := fs.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("cm-%03d", objects-1), metav1.GetOptions{}); err != nil {
			t.Errorf("a ConfigMap of the snapshot: %v", err)
		}
		if _, err := fs.CoreV1().ConfigMaps("default").Get(ctx, "after-s3", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a ConfigMap made after the snapshot: %v", err)
		}
		e.MustRun("cluster", "delete", "from-s3")

		t.Run("an object tampered with in the bucket is refused", func(t *testing.T) {
			e := e.For(t)
			removeLocal(t, e, newest.Name) // the download above kept a local copy
			bucket.tamper(t, newest.Name)
			e.MustRun("cluster", "restore", "tampered", "--from", "src/"+newest.Name)
			testenv.Eventually(t, time.Minute, "the restore refused", func() error {
				cl := e.Cluster("tampered")
				c := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionReady)
				if c == nil || c.Reason != fkev1.ReasonRestoreFailed || !strings.Contains(c.Message, "the copy in the S3 store") || !strings.Contains(c.Message, "does not match its checksum") {
					return fmt.Errorf("Ready condition %+v", c)
				}
				if cl.Status.Endpoint != "" {
					return fmt.Errorf("a control plane was started: %s", cl.Status.Endpoint)
				}
				return nil
			})
			for _, ext := range []string{".db", ".json"} {
				// (The manager tries again meanwhile: its download in
				// progress has a name of its own.)
				if _, err := os.Stat(filepath.Join(e.DataDir, "backups", "default", "src", newest.Name+ext)); !os.IsNotExist(err) {
					t.Errorf("the refused download was kept as %s%s: %v", newest.Name, ext, err)
				}
			}
			e.MustRun("cluster", "delete", "tampered")
			bucket.tamper(t, newest.Name) // and back
		})
	})
	t.Run("an upload refused for wrong credentials is reported, keeps the local snapshot and is retried", func(t *testing.T) {
		e := e.For(t)
		bucket.credentials(t, e, "not-the-secret")
		out := e.RunFail("cluster", "backup", "src")
		if !strings.Contains(out, "SignatureDoesNotMatch") || !strings.Contains(out, "the local snapshots are kept") {
			t.Errorf("fke cluster backup with wrong credentials says:\n%s", out)
		}
		cl := e.Cluster("src")
		if c := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionBackupSucceeded); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("BackupSucceeded: %+v", c)
		}
		up := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionBackupUploaded)
		if up == nil || up.Status != metav1.ConditionFalse || up.Reason != fkev1.ReasonUploadFailed || !strings.Contains(up.Message, "refused the credentials") {
			t.Errorf("BackupUploaded: %+v", up)
		}
		failed := cl.Status.Backups[len(cl.Status.Backups)-1].Name
		if get := e.MustRun("cluster", "get", "src"); !strings.Contains(get, fkev1.ReasonUploadFailed) {
			t.Errorf("fke cluster get shows no UploadFailed event:\n%s", get)
		}
		if _, ok := bucket.snapshots(t)[failed]; ok {
			t.Fatalf("snapshot %s is in the bucket, though its upload was refused", failed)
		}
		bucket.credentials(t, e, bucket.srv.SecretAccessKey)
		e.MustRun("cluster", "backup", "src")
		if _, ok := bucket.snapshots(t)[failed]; !ok {
			t.Errorf("snapshot %s, whose upload failed, was not uploaded with the next one", failed)
		}
	})
	t.Run("scheduled snapshots keep spec.backup.retain", func(t *testing.T) {
		e := e.For(t)
		var cl fkev1.Cluster
		key := client.ObjectKey{Namespace: "default", Name: "src"}
		if err := e.Client().Get(ctx, key, &cl); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cl.DeepCopy())
		cl.Spec.Backup.Schedule, cl.Spec.Backup.Retain = "@every 2s", 2
		if err := e.Client().Patch(ctx, &cl, patch); err != nil {
			t.Fatal(err)
		}
		before := map[string]bool{} // taken before retain was 2
		for _, b := range cl.Status.Backups {
			before[b.Name] = true
		}
		seen := map[string]bool{}
		testenv.Eventually(t, time.Minute, "scheduled snapshots", func() error {
			if err := e.Client().Get(ctx, key, &cl); err != nil {
				return err
			}
			if n := len(cl.Status.Backups); n > 2 && !before[cl.Status.Backups[n-1].Name] {
				t.Fatalf("%d snapshots kept, retain is 2: %v", n, cl.Status.Backups)
			}
			for _, b := range cl.Status.Backups {
				if !before[b.Name] {
					seen[b.Name] = true
				}
			}
			if len(seen) < 5 {
				return fmt.Errorf("%d snapshots seen", len(seen))
			}
			return nil
		})
		if entries, _ := filepath.Glob(filepath.Join(e.DataDir, "backups", "default", "src", "*.db")); len(entries) > 2 {
			t.Errorf("%d snapshot files on disk, retain is 2", len(entries))
		}
	})
	t.Run("a deleted cluster's snapshot still restores, with its keys", func(t *testing.T) {
		e := e.For(t)
		var cl fkev1.Cluster
		key := client.ObjectKey{Namespace: "default", Name: "src"}
		if err := e.Client().Get(ctx, key, &cl); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cl.DeepCopy())
		cl.Spec.Backup.Schedule = ""
		if err := e.Client().Patch(ctx, &cl, patch); err != nil {
			t.Fatal(err)
		}
		var records []fkev1.BackupRecord
		if err := json.Unmarshal([]byte(e.MustRun("cluster", "backups", "src", "-o", "json")), &records); err != nil || len(records) == 0 {
			t.Fatalf("backups: %v, %v", records, err)
		}
		last := records[len(records)-1].Name
		e.MustRun("cluster", "delete", "src", "--wait")
		// The store was pruned to retain too (2, since the scheduled snapshots).
		if in := bucket.snapshots(t); len(in) != 2 || in[last] == "" {
			t.Errorf("the bucket holds %v: want 2 snapshots, %s among them", in, last)
		}
		// Its local snapshots gone too: the snapshot comes from the store.
		if err := os.RemoveAll(filepath.Join(e.DataDir, "backups", "default", "src")); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		e.MustRun("cluster", "restore", "reborn", "--from", "src/"+last, "--wait")
		t.Logf("FIGURE restore of a deleted cluster's snapshot from the S3 store -> Ready: %s", time.Since(start).Round(10*time.Millisecond))
		waitEvent(t, e, "SnapshotDownloaded", last)
		rb := e.Tenant("reborn")
		got, err := rb.CoreV1().Secrets("default").Get(ctx, "db-password", metav1.GetOptions{})
		if err != nil || string(got.Data["password"]) != "s3cret" {
			t.Errorf("the Secret, encrypted with the deleted cluster's key: %v, %v", got, err)
		}
		if _, err := rb.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("cm-%03d", objects-1), metav1.GetOptions{}); err != nil {
			t.Errorf("a ConfigMap of the snapshot: %v", err)
		}
		if out := e.RunFail("cluster", "restore", "ghost", "--from", "nothing/"+last); !strings.Contains(out, "no snapshot of a deleted cluster") {
			t.Errorf("restoring from a cluster that never was:\n%s", out)
		}
	})
}

// removeLocal removes the local copy of snapshot name of cluster src.
func removeLocal(t *testing.T, e *testenv.Env, name string) {
	t.Helper()
	for _, ext := range []string{".db", ".json"} {
		if err := os.Remove(filepath.Join(e.DataDir, "backups", "default", "src", name+ext)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

// testBucket is a bucket of an S3 endpoint on loopback (test/s3server:
// gofakes3 behind a Signature V4 check), read and written with minio-go
// as a user's S3 client would.
type testBucket struct {
	srv    *s3server.Server
	name   string
	client *minio.Client
}

func s3Bucket(t *testing.T) *testBucket {
	srv := s3server.Start(t, "fke-backups")
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKeyID, srv.SecretAccessKey, ""), Region: srv.Region})
	if err != nil {
		t.Fatal(err)
	}
	return &testBucket{srv: srv, name: "fke-backups", client: c}
}

// credentials writes the Secret s3-credentials with the server's access
// key and secret.
func (b *testBucket) credentials(t *testing.T, e *testenv.Env, secret string) {
	t.Helper()
	want := b.srv.Secret("default", "s3-credentials", secret)
	s := &corev1.Secret{ObjectMeta: want.ObjectMeta}
	_, err := controllerutil.CreateOrUpdate(context.Background(), e.Client(), s, func() error {
		s.Data = want.Data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// snapshots lists the snapshots of cluster src in the bucket: name ->
// the SHA-256 of its .db object, checked against the one its .json
// records.
func (b *testBucket) snapshots(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	const prefix = "fke/default/src/"
	out := map[string]string{}
	for o := range b.client.ListObjects(ctx, b.name, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		name, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, prefix), ".db")
		if !ok {
			continue
		}
		sum := sha256.Sum256(b.read(t, o.Key))
		var rec struct{ SHA256 string }
		if err := json.Unmarshal(b.read(t, prefix+name+".json"), &rec); err != nil {
			t.Fatalf("%s.json: %v", name, err)
		}
		if got := hex.EncodeToString(sum[:]); got != rec.SHA256 {
			t.Fatalf("object %s has sha256 %s; its .json records %s", o.Key, got, rec.SHA256)
		}
		out[name] = rec.SHA256
	}
	return out
}

func (b *testBucket) read(t *testing.T, key string) []byte {
	t.Helper()
	obj, err := b.client.GetObject(context.Background(), b.name, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return data
}

// tamper changes one byte of snapshot name's data in the bucket, as
// anyone with write access to it could.
func (b *testBucket) tamper(t *testing.T, name string) {
	t.Helper()
	key := "fke/default/src/" + name + ".db"
	data := b.read(t, key)
	data[len(data)/2] ^= 0xff
	if _, err := b.client.PutObject(context.Background(), b.name, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}
