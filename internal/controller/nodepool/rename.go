package nodepool

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// rename gives a pool made before per-cluster names (fkev1.NodePool.Legacy)
// its object name CLUSTER.POOL without replacing its nodes: it creates the
// renamed pool (same spec, spec.poolName set), hands the machines over by
// their controller reference, then removes the old object. The machines
// already carry the labels the renamed pool selects (cluster and pool
// name), and its template hash is the same, so it adopts them as they are.
// Every step is idempotent: after a crash the next reconcile of the old
// pool (every pool is reconciled when the manager starts) goes on.
func (r *Reconciler) rename(ctx context.Context, old *fkev1.NodePool, machines []*fkev1.Machine) error {
	key := client.ObjectKey{Namespace: old.Namespace, Name: fkev1.NodePoolObjectName(old.Spec.ClusterName, old.Name)}
	renamed := &fkev1.NodePool{}
	err := r.Client.Get(ctx, key, renamed)
	switch {
	case apierrors.IsNotFound(err):
		renamed = renamedPool(old, key.Name)
		if err := r.Client.Create(ctx, renamed); err != nil {
			return fmt.Errorf("creating node pool %s renamed from %s: %w", key.Name, old.Name, err)
		}
	case err != nil:
		return fmt.Errorf("getting node pool %s: %w", key.Name, err)
	case renamed.Annotations[fkev1.AnnotationRenamedFrom] != old.Name:
		// Someone made CLUSTER.POOL by hand: two pools would claim the
		// same machines. Leave both alone and say so.
		r.Recorder.Eventf(old, nil, corev1.EventTypeWarning, "RenameConflict", "Rename",
			"cannot rename to %s: a node pool of that name already exists; delete one of the two", key.Name)
		return nil
	}
	for _, m := range machines {
		if err := r.handOver(ctx, m, old, renamed); err != nil {
			return err
		}
	}
	if controllerutil.RemoveFinalizer(old, fkev1.NodePoolFinalizer) {
		if err := r.Client.Update(ctx, old); err != nil {
			return client.IgnoreNotFound(fmt.Errorf("releasing node pool %s: %w", old.Name, err))
		}
	}
	if err := r.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting node pool %s after its rename: %w", old.Name, err)
	}
	r.Recorder.Eventf(renamed, nil, corev1.EventTypeNormal, "Renamed", "Rename",
		"node pool %s of cluster %s is now named %s; its %d machines were kept", old.Name, old.Spec.ClusterName, renamed.Name, len(machines))
	return nil
}

// renamedPool is old under its per-cluster name.
func renamedPool(old *fkev1.NodePool, name string) *fkev1.NodePool {
	np := &fkev1.NodePool{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   old.Namespace,
			Name:        name,
			Labels:      maps.Clone(old.Labels),
			Annotations: maps.Clone(old.Annotations),
		},
		Spec: *old.Spec.DeepCopy(),
	}
	if np.Labels == nil {
		np.Labels = map[string]string{}
	}
	np.Labels[fkev1.LabelCluster] = old.Spec.ClusterName
	if np.Annotations == nil {
		np.Annotations = map[string]string{}
	}
	np.Annotations[fkev1.AnnotationRenamedFrom] = old.Name
	np.Spec.PoolName = old.Name
	return np
}

// handOver makes renamed the controller of machine m in place of old.
func (r *Reconciler) handOver(ctx context.Context, m *fkev1.Machine, old, renamed *fkev1.NodePool) error {
	owned := false
	var refs []metav1.OwnerReference
	for _, ref := range m.OwnerReferences {
		if ref.UID == old.UID || ref.UID == renamed.UID {
			owned = owned || ref.UID == renamed.UID
			continue
		}
		refs = append(refs, ref)
	}
	if owned && len(refs) == len(m.OwnerReferences)-1 {
		return nil // renamed already controls it, old does not
	}
	patched := m.DeepCopy()
	patched.OwnerReferences = append(refs, *metav1.NewControllerRef(renamed, fkev1.GroupVersion.WithKind("NodePool")))
	if err := r.Client.Patch(ctx, patched, client.MergeFrom(m)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("handing machine %s over to node pool %s: %w", m.Name, renamed.Name, err)
	}
	return nil
}
