package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/test/testenv"
)

// TestEtcdBackupAndRestore: snapshots on request and on a schedule, a
// cluster restored from one has the snapshot's objects (Secrets readable:
// same keys), and a snapshot that fails its checksum is refused.
func TestEtcdBackupAndRestore(t *testing.T) {
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
	t.Run("a snapshot that fails its checksum is refused", func(t *testing.T) {
		e.MustRun("cluster", "backup", "src")
		var records []fkev1.BackupRecord
		if err := json.Unmarshal([]byte(e.MustRun("cluster", "backups", "src", "-o", "json")), &records); err != nil || len(records) != 2 {
			t.Fatalf("backups: %v, %v", records, err)
		}
		bad := records[1].Name
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
	t.Run("scheduled snapshots keep spec.backup.retain", func(t *testing.T) {
		var cl fkev1.Cluster
		key := client.ObjectKey{Namespace: "default", Name: "src"}
		if err := e.Client().Get(ctx, key, &cl); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cl.DeepCopy())
		cl.Spec.Backup = &fkev1.ClusterBackup{Schedule: "@every 2s", Retain: 2}
		if err := e.Client().Patch(ctx, &cl, patch); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		testenv.Eventually(t, time.Minute, "scheduled snapshots", func() error {
			if err := e.Client().Get(ctx, key, &cl); err != nil {
				return err
			}
			if len(cl.Status.Backups) > 2 {
				t.Fatalf("%d snapshots kept, retain is 2", len(cl.Status.Backups))
			}
			for _, b := range cl.Status.Backups {
				seen[b.Name] = true
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
		var cl fkev1.Cluster
		key := client.ObjectKey{Namespace: "default", Name: "src"}
		if err := e.Client().Get(ctx, key, &cl); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cl.DeepCopy())
		cl.Spec.Backup = nil
		if err := e.Client().Patch(ctx, &cl, patch); err != nil {
			t.Fatal(err)
		}
		var records []fkev1.BackupRecord
		if err := json.Unmarshal([]byte(e.MustRun("cluster", "backups", "src", "-o", "json")), &records); err != nil || len(records) == 0 {
			t.Fatalf("backups: %v, %v", records, err)
		}
		last := records[len(records)-1].Name
		e.MustRun("cluster", "delete", "src", "--wait")
		start := time.Now()
		e.MustRun("cluster", "restore", "reborn", "--from", "src/"+last, "--wait")
		t.Logf("FIGURE restore of a deleted cluster's snapshot -> Ready: %s", time.Since(start).Round(10*time.Millisecond))
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
