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

// Why leases are released before kwok starts:
//
// kwok holds each simulated node's Lease (namespace kube-node-lease) under an
// identity made of the host name and a random UUID, new for every process,
// and it only plays a node's stages (the one that makes it Ready included)
// while it holds that node's Lease. A Lease held by another identity is taken
// over only once it has expired: renewTime + nodeLeaseDurationSeconds (40 s).
// When the kwok process of a cluster dies (it dies with fke-manager), the
// Leases of the nodes it had just registered but not yet made Ready are
// still held by the dead process, so the next kwok leaves those nodes
// NotReady for up to 40 s. The provider runs the only kwok process of a
// cluster, and when it starts one no other runs, so every Lease of its
// nodes held by anyone is held by a dead process: the provider clears the
// holder of those Leases before kwok starts, and kwok takes them at once.

// leaseReleaseWorkers bounds the Lease updates in flight while releasing.
const leaseReleaseWorkers = 16

// needsRelease reports whether lease names a holder, so that a new kwok
// process would wait for it to expire before taking it.
func needsRelease(lease *coordinationv1.Lease) bool {
	return lease.Spec.HolderIdentity != nil
}

// released returns a copy of lease without a holder. renewTime is kept, so
// kube-controller-manager still counts the node as heard from.
func released(lease *coordinationv1.Lease) *coordinationv1.Lease {
	out := lease.DeepCopy()
	out.Spec.HolderIdentity = nil
	return out
}

// releaseLeases clears the holder of the node Lease of every Node the
// provider made in cluster, so that a kwok process about to start takes them
// without waiting for them to expire. It must only run while no kwok process
// of cluster runs. A Lease that is gone or changed meanwhile is skipped. It
// returns how many Leases it released.
func releaseLeases(ctx context.Context, client kubernetes.Interface, cluster nodeprovider.Cluster) (int, error) {
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
	var todo []*coordinationv1.Lease
	for i := range leases.Items {
		if l := &leases.Items[i]; ourNodes[l.Name] && needsRelease(l) {
			todo = append(todo, released(l))
		}
	}
	return len(todo), updateAll(ctx, client, todo)
}

// updateAll updates leases with at most leaseReleaseWorkers requests in
// flight. Conflicts and NotFound are not errors: the Lease moved on.
func updateAll(ctx context.Context, client kubernetes.Interface, leases []*coordinationv1.Lease) error {
	work := make(chan *coordinationv1.Lease)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range min(leaseReleaseWorkers, len(leases)) {
		wg.Go(func() {
			for l := range work {
				_, err := client.CoordinationV1().Leases(l.Namespace).Update(ctx, l, metav1.UpdateOptions{})
				if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("releasing lease %s: %w", l.Name, err))
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
