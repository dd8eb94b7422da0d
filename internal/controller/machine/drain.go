package machine

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/internal/tenant"
)

// finalize cordons and drains the Node, removes the instance, then the finalizer.
// When the cluster itself is going away there is nothing to drain: the
// cluster controller releases the provider's resources.
func (r *Reconciler) finalize(ctx context.Context, m *fkev1.Machine, clusterGone bool) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(m, fkev1.MachineFinalizer) {
		return ctrl.Result{}, nil
	}
	if m.Status.Phase != fkev1.MachineDeleting {
		before := m.DeepCopy()
		m.Status.Phase = fkev1.MachineDeleting
		if err := r.Client.Status().Patch(ctx, m, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
	}
	if !clusterGone && m.Status.ProviderID != "" {
		cl := &fkev1.Cluster{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ClusterName}, cl); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		t, err := r.Tenants.Get(ctx, client.ObjectKeyFromObject(cl).String())
		if err != nil {
			return ctrl.Result{}, err
		}
		remaining, err := r.drain(ctx, t, m)
		if err != nil {
			return ctrl.Result{}, err
		}
		if remaining > 0 {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		if p, ok := r.Providers[m.Spec.Provider]; ok {
			if err := p.Delete(ctx, r.providerCluster(cl, t), m.Status.ProviderID); err != nil && !isNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("deleting instance %s: %w", m.Status.ProviderID, err)
			}
		}
		r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, "Deleted", "Delete", "removed node %s", m.Status.NodeName)
	}
	controllerutil.RemoveFinalizer(m, fkev1.MachineFinalizer)
	if err := r.Client.Update(ctx, m); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	return ctrl.Result{}, nil
}

// drain cordons the Node and evicts its pods (PodDisruptionBudgets apply).
// After the drain timeout the remaining pods are deleted. It returns how many
// pods still have to leave.
func (r *Reconciler) drain(ctx context.Context, t *tenant.Tenant, m *fkev1.Machine) (int, error) {
	node := &corev1.Node{}
	if err := t.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, err
	}
	if !node.Spec.Unschedulable {
		patch := []byte(`{"spec":{"unschedulable":true}}`)
		if err := t.Client.Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
			return 0, fmt.Errorf("cordoning %s: %w", node.Name, err)
		}
	}
	// The pod index's objects: only read, and evicted or deleted by name.
	pods, _ := t.PodIndex.OnNode(node.Name)
	timeout := r.DrainTimeout
	if timeout == 0 {
		timeout = DefaultDrainTimeout
	}
	expired := m.DeletionTimestamp != nil && time.Since(m.DeletionTimestamp.Time) > timeout
	// A Node that is not Ready has no kubelet to confirm that its pods
	// stopped: once they are terminating they count as gone (the machine's
	// removal stops what still runs, and the pod garbage collector removes
	// their objects with the Node), as Cluster API drains unreachable nodes.
	unreachable := !nodeutil.NodeReady(node)
	remaining := 0
	for _, p := range pods {
		if !nodeutil.NeedsEviction(p) {
			continue
		}
		if p.DeletionTimestamp != nil {
			if !unreachable {
				remaining++
			}
			continue
		}
		remaining++
		if expired {
			if err := t.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				return remaining, fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err)
			}
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
		err := t.Clientset.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			// A PodDisruptionBudget forbids it now; try again later.
		default:
			return remaining, fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return remaining, nil
}
