// Package poolsize writes a node pool's desired size and records the
// decision in its status: the node autoscaler and the ProvisioningRequest
// controller both resize pools through it.
package poolsize

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// Resize sets a pool's desired replicas to to (never above its maxSize)
// and records the decision in its status; the autoscaler and the
// ProvisioningRequest controller both resize through it. opts may ask for an
// optimistically locked spec patch (client.MergeFromWithOptimisticLock).
func Resize(ctx context.Context, c client.Client, np *fkev1.NodePool, to int, reason string, now time.Time, opts ...client.MergeFromOption) error {
	from, err := SetReplicas(ctx, c, np, to, opts...)
	if err != nil {
		return err
	}
	return RecordDecision(ctx, c, np, from, to, reason, now)
}

// SetReplicas patches the pool's spec.replicas to to (never above maxSize)
// and returns the desired replicas it had before.
func SetReplicas(ctx context.Context, c client.Client, np *fkev1.NodePool, to int, opts ...client.MergeFromOption) (from int, err error) {
	if a := np.Spec.Autoscaling; a != nil && to > int(a.MaxSize) {
		return 0, fmt.Errorf("resizing node pool %s to %d: above max size %d", np.Name, to, a.MaxSize)
	}
	from = np.DesiredReplicas()
	patch := client.MergeFromWithOptions(np.DeepCopy(), opts...)
	np.Spec.Replicas = ptr.To(int32(to))
	if err := c.Patch(ctx, np, patch); err != nil {
		return 0, fmt.Errorf("resizing node pool %s: %w", np.Name, err)
	}
	return from, nil
}

// RecordDecision writes a resize from → to into the pool's status.
func RecordDecision(ctx context.Context, c client.Client, np *fkev1.NodePool, from, to int, reason string, now time.Time) error {
	spatch := client.MergeFrom(np.DeepCopy())
	np.Status.DesiredReplicas = int32(to)
	np.Status.LastScaleDecision = &fkev1.ScaleDecision{Time: metav1.NewTime(now), From: int32(from), To: int32(to), Reason: reason}
	if err := c.Status().Patch(ctx, np, spatch); err != nil {
		return fmt.Errorf("recording scale decision of %s: %w", np.Name, err)
	}
	return nil
}
