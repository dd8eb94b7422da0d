// Package backup is the controller that takes etcd snapshots of tenant
// clusters: on the Cluster's spec.backup schedule, and when the
// fke.dev/backup-requested annotation changes (fke cluster backup). It
// keeps spec.backup.retain snapshots (internal/backup) and lists them in
// status.backups.
package backup

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/clusterbackup"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

// DefaultRetain is how many snapshots are kept when spec.backup.retain is unset.
const DefaultRetain = 7

// Reconciler takes the snapshots.
type Reconciler struct {
	Client client.Client
	// APIReader reads a cluster past the cache after a conflicting status
	// write (Client when nil).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Dir is where snapshots are kept: Dir/<namespace>/<cluster>/.
	Dir string
	// Runtimes run the control planes, by spec.runtime; a cluster whose
	// runtime this manager does not run is not backed up here.
	Runtimes map[fkev1.ControlPlaneRuntime]controlplane.Runtime
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// ClusterDir is where the snapshots of cluster namespace/name are kept.
func ClusterDir(root, namespace, name string) backup.Dir {
	return backup.Dir(filepath.Join(root, namespace, name))
}

func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	// Every change of a Cluster (spec.backup, the request annotation, the
	// control plane becoming ready) is looked at; nothing happens unless a
	// snapshot is requested or due.
	return ctrl.NewControllerManagedBy(mgr).Named("backup").For(&fkev1.Cluster{}).Complete(r)
}

// Reconcile takes a snapshot when one is requested or due.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cl := &fkev1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cl); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	rt := clusterbackup.RuntimeOf(r.Runtimes, cl)
	if !cl.DeletionTimestamp.IsZero() || !meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionControlPlaneReady) || rt == nil {
		return ctrl.Result{}, nil
	}
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	take, after, err := wanted(cl, now)
	if take && r.APIReader != nil {
		// The cache may not hold this controller's own last status write
		// yet (a reconcile queued meanwhile runs right after the one that
		// wrote it): a snapshot is taken only if the cluster as the API
		// server has it still wants one.
		fresh := &fkev1.Cluster{}
		if err := r.APIReader.Get(ctx, req.NamespacedName, fresh); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		cl = fresh
		take, after, err = wanted(cl, now)
	}
	if err != nil {
		return ctrl.Result{}, r.setResult(ctx, cl, cl.Annotations[fkev1.AnnotationBackupRequested], nil, err, nil)
	}
	if !take {
		return ctrl.Result{RequeueAfter: after}, nil
	}
	requested := cl.Annotations[fkev1.AnnotationBackupRequested]
	snap, err := r.take(ctx, rt, cl, now)
	if errors.Is(err, backup.ErrExists) {
		// A snapshot was taken in this second already: the next second
		// names this one.
		return ctrl.Result{RequeueAfter: backup.NextName(now).Sub(now)}, nil
	}
	var up *uploadResult
	if err == nil {
		up = r.upload(ctx, cl)
	}
	if serr := r.setResult(ctx, cl, requested, snap, err, up); serr != nil {
		return ctrl.Result{}, serr
	}
	if err != nil {
		return ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	return ctrl.Result{RequeueAfter: time.Second}, nil
}

// wanted decides whether cl wants a snapshot at now: one requested by
// the annotation and not yet taken, or one due on spec.backup.schedule.
// When it does not, after is when to look again (0: only on a change).
// An invalid schedule is an error. Pure.
func wanted(cl *fkev1.Cluster, now time.Time) (take bool, after time.Duration, err error) {
	requested := cl.Annotations[fkev1.AnnotationBackupRequested]
	if requested != "" && requested != cl.Status.BackupRequest {
		return true, 0, nil
	}
	b := cl.Spec.Backup
	if b == nil || b.Schedule == "" {
		return false, 0, nil
	}
	sched, err := backup.ParseSchedule(b.Schedule)
	if err != nil {
		return false, 0, err
	}
	var last time.Time
	if n := len(cl.Status.Backups); n > 0 {
		last = cl.Status.Backups[n-1].Time.Time
	}
	due := backup.Due(sched, last, cl.CreationTimestamp.Time)
	if now.Before(due) {
		return false, due.Sub(now), nil
	}
	return true, 0, nil
}

// retain is how many snapshots cl keeps (locally, and in its store).
func retain(cl *fkev1.Cluster) int {
	if b := cl.Spec.Backup; b != nil && b.Retain > 0 {
		return int(b.Retain)
	}
	return DefaultRetain
}

// take snapshots cl's etcd and prunes the old snapshots.
func (r *Reconciler) take(ctx context.Context, rt controlplane.Runtime, cl *fkev1.Cluster, now time.Time) (*backup.Snapshot, error) {
	secret := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: fkev1.PKISecretName(cl.Name)}, secret); err != nil {
		return nil, fmt.Errorf("reading the cluster's PKI: %w", err)
	}
	dir := ClusterDir(r.Dir, cl.Namespace, cl.Name)
	snap, err := clusterbackup.TakeSnapshot(ctx, rt, cl, pki.Bundle(secret.Data), dir, now)
	if err != nil {
		return nil, err
	}
	if err := clusterbackup.EnsureRestoreKeys(ctx, r.Client, cl, pki.Bundle(secret.Data)); err != nil {
		return &snap, err
	}
	if _, err := backup.Prune(dir, retain(cl)); err != nil {
		return &snap, fmt.Errorf("pruning old snapshots: %w", err)
	}
	return &snap, nil
}

// uploadResult is what copying the snapshots to the S3 store did.
type uploadResult struct {
	where string
	res   backup.SyncResult
	err   error
}

// uploadTimeout bounds one round of uploads and pruning.
const uploadTimeout = 10 * time.Minute

// upload makes cl's S3 store (none: nil) hold the snapshots kept:
// those it lacks (a failed upload before included) are uploaded, those
// beyond retain removed.
func (r *Reconciler) upload(ctx context.Context, cl *fkev1.Cluster) *uploadResult {
	if cl.Spec.Backup == nil || cl.Spec.Backup.S3 == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, uploadTimeout)
	defer cancel()
	rem, err := clusterbackup.OpenStore(ctx, r.Client, cl.Namespace, cl.Name, cl.Spec.Backup.S3)
	if err != nil {
		return &uploadResult{err: err}
	}
	res, err := backup.Sync(ctx, rem, ClusterDir(r.Dir, cl.Namespace, cl.Name), retain(cl))
	return &uploadResult{where: rem.String(), res: res, err: err}
}

// setResult records a snapshot (or why it failed) and its upload (nil:
// no store, or no snapshot to upload) in cl's status. What to record is
// decided (and its events sent) once; it is written only onto the newest
// cluster (a status read from the cache, once behind, would put back the
// lists another writer changed), read again after a conflict.
func (r *Reconciler) setResult(ctx context.Context, cl *fkev1.Cluster, requested string, snap *backup.Snapshot, err error, up *uploadResult) error {
	cond := metav1.Condition{Type: fkev1.ConditionBackupSucceeded, ObservedGeneration: cl.Generation}
	if err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "BackupFailed", err.Error()
		r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, "BackupFailed", "Backup", "%v", err)
	} else {
		cond.Status, cond.Reason = metav1.ConditionTrue, "SnapshotTaken"
		cond.Message = fmt.Sprintf("snapshot %s: %d bytes at revision %d, sha256 %s", snap.Name, snap.Size, snap.Revision, snap.SHA256)
		r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "SnapshotTaken", "Backup", "%s", cond.Message)
	}
	var uploaded *metav1.Condition
	var remote []backup.Snapshot
	remoteKnown := true
	noStore := cl.Spec.Backup == nil || cl.Spec.Backup.S3 == nil
	switch {
	case noStore:
	case up != nil:
		remote, remoteKnown = up.res.Remote, up.res.Listed
		c := r.uploadedCondition(cl, up)
		uploaded = &c
	default:
		remoteKnown = false
	}
	record := func(cl *fkev1.Cluster) {
		cl.Status.BackupRequest = requested
		meta.SetStatusCondition(&cl.Status.Conditions, cond)
		if noStore {
			meta.RemoveStatusCondition(&cl.Status.Conditions, fkev1.ConditionBackupUploaded)
		} else if uploaded != nil {
			meta.SetStatusCondition(&cl.Status.Conditions, *uploaded)
		}
		if kept, lerr := backup.List(ClusterDir(r.Dir, cl.Namespace, cl.Name)); lerr == nil {
			cl.Status.Backups = clusterbackup.BackupRecords(cl.Status.Backups, kept, remote, remoteKnown)
		}
	}
	for attempt := 1; ; attempt++ {
		before := cl.DeepCopy()
		record(cl)
		if equality.Semantic.DeepEqual(before.Status, cl.Status) {
			return nil
		}
		perr := r.Client.Status().Patch(ctx, cl, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if perr == nil {
			return nil
		}
		if !apierrors.IsConflict(perr) || attempt == statusAttempts {
			return fmt.Errorf("recording the snapshot in the cluster's status: %w", perr)
		}
		fresh := &fkev1.Cluster{}
		if gerr := r.reader().Get(ctx, client.ObjectKeyFromObject(cl), fresh); gerr != nil {
			return fmt.Errorf("reading cluster %s again to record its snapshot: %w", cl.Name, gerr)
		}
		cl = fresh
	}
}

// statusAttempts is how many times setResult writes the status, reading
// the cluster again after each conflict.
const statusAttempts = 5

// reader reads past the cache where there is an API reader.
func (r *Reconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// uploadedCondition is the BackupUploaded condition after up; its events
// say what up did.
func (r *Reconciler) uploadedCondition(cl *fkev1.Cluster, up *uploadResult) metav1.Condition {
	cond := metav1.Condition{Type: fkev1.ConditionBackupUploaded, ObservedGeneration: cl.Generation}
	if up.err != nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, fkev1.ReasonUploadFailed
		cond.Message = fmt.Sprintf("copying snapshots to the S3 store failed: %v; the local snapshots are kept, and the upload is tried again with the next snapshot", up.err)
		r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, fkev1.ReasonUploadFailed, "Upload", "%s", cond.Message)
	} else {
		cond.Status, cond.Reason = metav1.ConditionTrue, fkev1.ReasonUploaded
		cond.Message = fmt.Sprintf("%d snapshots in %s", len(up.res.Remote), up.where)
		if n := len(up.res.Uploaded); n > 0 {
			cond.Message = fmt.Sprintf("snapshot %s uploaded; %s", up.res.Uploaded[n-1], cond.Message)
		}
		if len(up.res.Corrupt) > 0 {
			msg := fmt.Sprintf("local snapshots %s fail their checksum and were not uploaded", orNone(up.res.Corrupt))
			cond.Message += "; " + msg
			r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, "SnapshotCorrupt", "Upload", "%s", msg)
		}
		if len(up.res.Uploaded) > 0 || len(up.res.Pruned) > 0 {
			msg := fmt.Sprintf("uploaded %s to %s", orNone(up.res.Uploaded), up.where)
			if len(up.res.Pruned) > 0 {
				msg += fmt.Sprintf("; removed %s from it (beyond retain)", strings.Join(up.res.Pruned, ", "))
			}
			r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "SnapshotUploaded", "Upload", "%s", msg)
		}
	}
	return cond
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
