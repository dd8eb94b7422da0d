package admission

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/netrange"
)

// CheckLocalPodRange returns why the host cannot route cl's pod range to
// local nodes, or "": when cl has a pool of local nodes in pools and its
// pod range overlaps the addresses of local nodes or the pod range of
// another cluster in clusters with such a pool (netrange.CheckLocalPodRange,
// the check the local node provider makes before it makes a node, so that
// such a pool is refused when it is created rather than when its nodes
// fail). clusters and pools are those of every namespace, pools being
// deleted included (their nodes are there until they are gone). A cluster
// whose pod range is not chosen yet passes: the range chosen for it
// overlaps no other cluster's. Pure.
func CheckLocalPodRange(cl *fkev1.Cluster, clusters []fkev1.Cluster, pools []fkev1.NodePool) string {
	mine, err := netip.ParsePrefix(cl.Spec.Network.PodCIDR)
	if err != nil {
		return ""
	}
	local := map[client.ObjectKey]bool{}
	for _, p := range pools {
		if p.Spec.Provider == fkev1.ProviderLocal {
			local[client.ObjectKey{Namespace: p.Namespace, Name: p.Spec.ClusterName}] = true
		}
	}
	key := client.ObjectKeyFromObject(cl)
	if !local[key] {
		return ""
	}
	var others []netrange.LocalCluster
	for i := range clusters {
		o := &clusters[i]
		p, err := netip.ParsePrefix(o.Spec.Network.PodCIDR)
		if err == nil && local[client.ObjectKeyFromObject(o)] {
			others = append(others, netrange.LocalCluster{Key: client.ObjectKeyFromObject(o).String(), PodCIDR: p})
		}
	}
	slices.SortFunc(others, func(a, b netrange.LocalCluster) int { return cmp.Compare(a.Key, b.Key) })
	if err := netrange.CheckLocalPodRange(netrange.LocalCluster{Key: key.String(), PodCIDR: mine}, others); err != nil {
		return err.Error()
	}
	return ""
}

// checkLocalPodRange reads the clusters and node pools of every namespace
// and checks cl's pod range with them and with np, a pool being created
// (nil when none): CheckLocalPodRange.
func (v *Validator) checkLocalPodRange(ctx context.Context, cl *fkev1.Cluster, np *fkev1.NodePool) (string, error) {
	var pools fkev1.NodePoolList
	if err := v.Reader.List(ctx, &pools); err != nil {
		return "", fmt.Errorf("listing node pools: %w", err)
	}
	if np != nil {
		pools.Items = append(pools.Items, *np)
	}
	var clusters fkev1.ClusterList
	if err := v.Reader.List(ctx, &clusters); err != nil {
		return "", fmt.Errorf("listing clusters: %w", err)
	}
	return CheckLocalPodRange(cl, clusters.Items, pools.Items), nil
}
