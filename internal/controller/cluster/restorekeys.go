package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/pki"
)

// restoreSeed returns the CAs and keys a cluster restored from snapshot
// from.Snapshot of cluster from.Cluster starts with: the source's PKI
// Secret while the source exists, else the restore-keys Secret of the
// cluster the snapshot was taken of.
func (r *Reconciler) restoreSeed(ctx context.Context, cl *fkev1.Cluster) (pki.Bundle, error) {
	namespace, from := cl.Namespace, cl.Spec.RestoreFrom
	src := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fkev1.PKISecretName(from.Cluster)}, src)
	if err == nil {
		return pki.Bundle(src.Data), nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("restoring from %s: reading its PKI: %w", from.Cluster, err)
	}
	snap, _, err := r.restoreSnapshot(ctx, cl, from)
	if err != nil {
		return nil, fmt.Errorf("restoring from snapshot %s of %s: %w", from.Snapshot, from.Cluster, err)
	}
	if snap.ClusterUID == "" {
		return nil, fmt.Errorf("restoring from %s: the cluster is gone and snapshot %s was taken before fke kept the keys of snapshots", from.Cluster, from.Snapshot)
	}
	keys := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: backup.KeysSecretName(snap.ClusterUID)}, keys); err != nil {
		return nil, fmt.Errorf("restoring from %s (deleted): reading the keys of its snapshots (Secret %s): %w", from.Cluster, backup.KeysSecretName(snap.ClusterUID), err)
	}
	return pki.Bundle(keys.Data), nil
}
