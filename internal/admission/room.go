package admission

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// NodeMaskSize is the prefix length of the pod range kube-controller-manager
// gives each node (--node-cidr-mask-size, default /24 for IPv4): a pod CIDR of
// /N has room for 2^(24-N) nodes.
const NodeMaskSize = 24

// NodeRoom returns how many nodes podCIDR has a /24 for, and false when
// podCIDR is empty or not an IPv4 CIDR (the schema checks its form; an empty
// one is chosen later, so there is nothing to check yet).
func NodeRoom(podCIDR string) (int64, bool) {
	p, err := netip.ParsePrefix(podCIDR)
	if err != nil || !p.Addr().Is4() {
		return 0, false
	}
	if p.Bits() > NodeMaskSize {
		return 0, true
	}
	return int64(1) << (NodeMaskSize - p.Bits()), true
}

// PoolMaximum is the most nodes a pool may have: its replicas, or its
// autoscaling maxSize when larger. Surge nodes during a replacement are not
// counted.
func PoolMaximum(spec fkev1.NodePoolSpec) int64 {
	var n int64
	if spec.Replicas != nil {
		n = int64(*spec.Replicas)
	}
	if a := spec.Autoscaling; a != nil && int64(a.MaxSize) > n {
		n = int64(a.MaxSize)
	}
	return n
}

// CheckRoom returns why a cluster's pod range cannot hold the nodes its pools
// may reach (pools: pool name to maximum), or "" when it can or when the
// range is not known yet.
func CheckRoom(cluster *fkev1.Cluster, pools map[string]int64) string {
	room, ok := NodeRoom(cluster.Spec.Network.PodCIDR)
	if !ok {
		return ""
	}
	var total int64
	names := make([]string, 0, len(pools))
	for name, n := range pools {
		total += n
		names = append(names, name)
	}
	if total <= room {
		return ""
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %d", name, pools[name]))
	}
	return fmt.Sprintf("cluster %s's podCIDR %s has room for %d nodes (a /%d each), but its node pools could reach %d (%s): lower replicas or autoscaling.maxSize, or create the cluster with a larger podCIDR",
		cluster.Name, cluster.Spec.Network.PodCIDR, room, NodeMaskSize, total, strings.Join(parts, ", "))
}

// CheckMaxNodes returns why a cluster's autoscaling.maxNodes exceeds what its
// pod range holds, or "".
func CheckMaxNodes(cluster *fkev1.Cluster) string {
	room, ok := NodeRoom(cluster.Spec.Network.PodCIDR)
	max := int64(cluster.Spec.Autoscaling.MaxNodes)
	if !ok || max <= room {
		return ""
	}
	return fmt.Sprintf("autoscaling.maxNodes %d is more than podCIDR %s has room for (%d nodes, a /%d each): lower maxNodes or choose a larger podCIDR",
		max, cluster.Spec.Network.PodCIDR, room, NodeMaskSize)
}
