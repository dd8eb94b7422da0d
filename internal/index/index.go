// Package index names the cache indexes fke's controllers read through, so
// that the work of one reconcile is bounded by the objects of the cluster
// it reconciles: the NodePools and Machines of one Cluster are found by an
// index lookup, not by scanning every object of its namespace (which, with
// many clusters in one namespace, grows with all of them).
package index

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// Cluster indexes NodePools by spec.clusterName and Machines by their
// fke.dev/cluster label: the name of the Cluster (in the same namespace)
// they belong to.
const Cluster = "fke.dev/cluster"

// NodePoolCluster is the Cluster index's value of a NodePool.
func NodePoolCluster(o client.Object) []string {
	np, ok := o.(*fkev1.NodePool)
	if !ok || np.Spec.ClusterName == "" {
		return nil
	}
	return []string{np.Spec.ClusterName}
}

// MachineCluster is the Cluster index's value of a Machine.
func MachineCluster(o client.Object) []string {
	if v := o.GetLabels()[fkev1.LabelCluster]; v != "" {
		return []string{v}
	}
	return nil
}

// Register adds the indexes to a manager's cache (mgr.GetFieldIndexer()).
func Register(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &fkev1.NodePool{}, Cluster, NodePoolCluster); err != nil {
		return fmt.Errorf("indexing node pools by cluster: %w", err)
	}
	if err := idx.IndexField(ctx, &fkev1.Machine{}, Cluster, MachineCluster); err != nil {
		return fmt.Errorf("indexing machines by cluster: %w", err)
	}
	return nil
}

// OfCluster selects the NodePools or Machines of the Cluster namespace/name
// through the Cluster index: use it with a client that reads the
// manager's cache (the API server does not know the index).
func OfCluster(namespace, name string) []client.ListOption {
	return []client.ListOption{client.InNamespace(namespace), client.MatchingFields{Cluster: name}}
}

// EnqueueCluster maps a NodePool or Machine to a request for its Cluster.
func EnqueueCluster() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		var name string
		switch v := o.(type) {
		case *fkev1.NodePool:
			name = v.Spec.ClusterName
		case *fkev1.Machine:
			name = v.Spec.ClusterName
		}
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
}
