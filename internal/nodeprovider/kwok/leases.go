package kwok

import (
	"context"
	"errors"
	"fmt"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/internal/nodeprovider"
)

// Why the Leases of a cluster's nodes are deleted before kwok starts:
//
// kwok holds each simulated node's Lease (namespace kube-node-lease) under an
// identity made of the host name and a random UUID, new for every process,
// and it only plays a node's stages (the one that makes it Ready included)
// while it holds that node's Lease. Two things delay a new kwok process on a
// cluster whose Leases exist, and its nodes stay NotReady meanwhile (for
// longer than a lease duration after fke-manager restarts):
//
//   - A Lease held by another identity is taken over only once it has
//     expired, renewTime + nodeLeaseDurationSeconds (40 s). When the kwok
//     process of a cluster dies (it dies with fke-manager), every Lease of
//     its nodes is held by the dead process.
//   - kwok decides from its Lease cache, which may not be synced yet when it
//     first sees the nodes: it then creates a Lease that exists, fails with
//     AlreadyExists and tries again only a quarter of the lease duration
//     later (10 s).
//
// The provider runs the only kwok process of a cluster, and when it starts
// one no other runs, so every Lease of its nodes belongs to a dead process:
// the provider deletes them, and the new kwok creates them at once. The
// Nodes keep their Ready condition meanwhile; kube-controller-manager falls
// back to the Node's status for the second a Lease is missing.

// leaseDeleteWorkers bounds the Lease deletions in flight.
const leaseDeleteWorkers = 16

// staleLeases returns the Leases among leases that belong to ourNodes.
func staleLeases(leases []coordinationv1.Lease, ourNodes map[string]bool) []*coordinationv1.Lease {
	var out []*coordinationv1.Lease
	for i := range leases {
		if ourNodes[leases[i].Name] {
			out = append(out, &leases[i])
		}
	}
	return out
}

// deleteLeases deletes the node Lease of every Node the provider made in
// cluster, so that a kwok process about to start takes its nodes at once. It
// must only run while no kwok process of cluster runs. It returns how many
// Leases it deleted.
func deleteLeases(ctx context.Context, client kubernetes.Interface, cluster nodeprovider.Cluster) (int, error) {
	ourNodes := map[string]bool{}
	opts := metav1.ListOptions{Limit: listPageSize}
	for {
		nodes, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return 0, fmt.Errorf("listing nodes of cluster %s: %w", cluster.Key, err)
		}
		for i := range nodes.Items {
			if ours(&nodes.Items[i], cluster) {
				ourNodes[nodes.Items[i].Name] = true
			}
		}
		if nodes.Continue == "" {
			break
		}
		opts.Continue = nodes.Continue
	}
	if len(ourNodes) == 0 {
		return 0, nil
	}
	leases, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("listing node leases of cluster %s: %w", cluster.Key, err)
	}
	todo := staleLeases(leases.Items, ourNodes)
	return len(todo), deleteAll(ctx, client, todo)
}

// deleteAll deletes leases, each only if unchanged since listed, with at
// most leaseDeleteWorkers requests in flight. A Lease already gone or
// replaced is not an error.
func deleteAll(ctx context.Context, client kubernetes.Interface, leases []*coordinationv1.Lease) error {
	work := make(chan *coordinationv1.Lease)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range min(leaseDeleteWorkers, len(leases)) {
		wg.Go(func() {
			for l := range work {
				err := client.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{
					Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion},
				})
				if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("deleting lease %s: %w", l.Name, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, l := range leases {
		work <- l
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}
