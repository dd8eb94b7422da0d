package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/clusterbackup"
)

// restoreSource says where the snapshots of cluster name (in namespace)
// are kept besides the data directory, and the checksum the management
// plane recorded of snapshot: from the Cluster while it exists, else from
// the restore-keys Secret its last snapshot left.
func (r *Reconciler) restoreSource(ctx context.Context, namespace, name, snapshot string) (store *fkev1.S3Store, sha256 string, err error) {
	src := &fkev1.Cluster{}
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, src)
	switch {
	case err == nil:
		if src.Spec.Backup != nil {
			store = src.Spec.Backup.S3
		}
		for _, b := range src.Status.Backups {
			if b.Name == snapshot {
				sha256 = b.SHA256
			}
		}
		return store, sha256, nil
	case !apierrors.IsNotFound(err):
		return nil, "", fmt.Errorf("reading cluster %s: %w", name, err)
	}
	var keys corev1.SecretList
	if err := r.Client.List(ctx, &keys, client.InNamespace(namespace), client.MatchingLabels{fkev1.LabelCluster: name}); err != nil {
		return nil, "", fmt.Errorf("looking for the snapshots of %s: %w", name, err)
	}
	var newest *corev1.Secret
	for i := range keys.Items {
		k := &keys.Items[i]
		if strings.HasPrefix(k.Name, backup.KeysSecretName("")) && (newest == nil || k.CreationTimestamp.After(newest.CreationTimestamp.Time)) {
			newest = k
		}
	}
	if newest == nil || newest.Annotations[clusterbackup.AnnotationKeysS3] == "" {
		return nil, "", nil
	}
	store = &fkev1.S3Store{}
	if err := json.Unmarshal([]byte(newest.Annotations[clusterbackup.AnnotationKeysS3]), store); err != nil {
		return nil, "", fmt.Errorf("the S3 store of %s's snapshots (Secret %s): %w", name, newest.Name, err)
	}
	return store, "", nil
}

// restoreSnapshot returns snapshot from.Snapshot of cluster from.Cluster
// (in cl's namespace) that cl is restored from, checked against its
// checksum, and the path of its data: the local copy, or else a copy
// downloaded from the source cluster's S3 store (and kept in the data
// directory).
func (r *Reconciler) restoreSnapshot(ctx context.Context, cl *fkev1.Cluster, from *fkev1.ClusterRestore) (backup.Snapshot, string, error) {
	namespace := cl.Namespace
	dir := r.backupDir(namespace, from.Cluster)
	store, want, err := r.restoreSource(ctx, namespace, from.Cluster, from.Snapshot)
	if err != nil {
		return backup.Snapshot{}, "", err
	}
	snap, lerr := backup.Verify(dir, from.Snapshot)
	if lerr == nil && want != "" && snap.SHA256 != want {
		lerr = fmt.Errorf("snapshot %s records sha256 %s, but was taken with %s: %w", from.Snapshot, snap.SHA256, want, backup.ErrChecksum)
	}
	if lerr == nil {
		return snap, dir.File(snap.Name), nil
	}
	if store == nil {
		return backup.Snapshot{}, "", lerr
	}
	rem, err := clusterbackup.OpenStore(ctx, r.Client, namespace, from.Cluster, store)
	if err == nil {
		snap, err = backup.Download(ctx, rem, from.Snapshot, dir, want)
	}
	if err != nil {
		return backup.Snapshot{}, "", fmt.Errorf("the local copy: %v; the copy in the S3 store: %w", lerr, err)
	}
	r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "SnapshotDownloaded", "Restore", "downloaded snapshot %s of %s from %s and checked its checksum (sha256 %s)", snap.Name, from.Cluster, rem, snap.SHA256)
	return snap, dir.File(snap.Name), nil
}
