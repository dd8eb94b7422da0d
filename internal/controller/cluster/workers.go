package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/index"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/tenant"
)

// removeWorkers deletes the cluster's NodePools and Machines (dropping their
// finalizers: the nodes go with the control plane), releases what the
// providers run for the cluster and disconnects from it. done is false while
// objects remain.
func (r *Reconciler) removeWorkers(ctx context.Context, cl *fkev1.Cluster) (done bool, err error) {
	var pools fkev1.NodePoolList
	if err := r.Client.List(ctx, &pools, index.OfCluster(cl.Namespace, cl.Name)...); err != nil {
		return false, fmt.Errorf("listing node pools: %w", err)
	}
	var machines fkev1.MachineList
	if err := r.Client.List(ctx, &machines, index.OfCluster(cl.Namespace, cl.Name)...); err != nil {
		return false, fmt.Errorf("listing machines: %w", err)
	}
	var objs []client.Object
	for i := range pools.Items {
		objs = append(objs, &pools.Items[i])
	}
	for i := range machines.Items {
		objs = append(objs, &machines.Items[i])
	}
	for _, o := range objs {
		if err := r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("deleting %s: %w", o.GetName(), err)
		}
		if controllerutil.RemoveFinalizer(o, fkev1.NodePoolFinalizer) || controllerutil.RemoveFinalizer(o, fkev1.MachineFinalizer) {
			if err := r.Client.Update(ctx, o); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return false, fmt.Errorf("releasing %s: %w", o.GetName(), err)
			}
		}
	}
	if len(objs) > 0 {
		return false, nil
	}
	key := client.ObjectKeyFromObject(cl).String()
	for name, p := range r.Providers {
		if err := p.Release(ctx, nodeprovider.Cluster{Key: key, Name: cl.Name, Hosted: cl.Spec.Runtime == fkev1.RuntimeHosted}); err != nil {
			return false, fmt.Errorf("releasing provider %s: %w", name, err)
		}
	}
	if r.Tenants != nil {
		r.Tenants.Forget(key)
	}
	return true, nil
}

// KubeconfigReader reads tenant admin kubeconfigs from their Secrets.
func KubeconfigReader(c client.Client) tenant.KubeconfigSource {
	return func(ctx context.Context, key string) ([]byte, error) {
		ns, name, err := toolscache.SplitMetaNamespaceKey(key)
		if err != nil || ns == "" {
			return nil, fmt.Errorf("cluster key %q is not namespace/name", key)
		}
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fkev1.KubeconfigSecretName(name)}, s); err != nil {
			return nil, fmt.Errorf("kubeconfig of cluster %s: %w", key, err)
		}
		data := s.Data[fkev1.KubeconfigKey]
		if len(data) == 0 {
			return nil, fmt.Errorf("kubeconfig of cluster %s is empty", key)
		}
		return data, nil
	}
}
