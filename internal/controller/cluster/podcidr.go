package cluster

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/netrange"
)

// ensurePodCIDR picks a pod range for a cluster that has none (see
// pickRange) and records it in the cluster's spec (set once).
func (r *Reconciler) ensurePodCIDR(ctx context.Context, cl *fkev1.Cluster) error {
	if cl.Spec.Network.PodCIDR != "" {
		return nil
	}
	pick, err := r.pickRange(ctx, client.ObjectKeyFromObject(cl).String(), cl.Spec.Network.ServiceCIDR)
	if err != nil {
		return err
	}
	before := cl.DeepCopy()
	cl.Spec.Network.PodCIDR = pick.String()
	if err := r.Client.Patch(ctx, cl, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("recording pod range %s: %w", pick, err)
	}
	r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "PodCIDRChosen", "Provision", "pod range %s chosen: it overlaps no host route and no other cluster", pick)
	return nil
}

// pickRange picks a pod range for the control plane of key (a cluster or a
// standby plane) with the given service range: one that overlaps no route
// of this host, no pod or service range of any cluster or standby plane,
// and none picked by a concurrent pick whose write the cache has not shown
// yet. The pick is remembered until the plane or cluster goes.
func (r *Reconciler) pickRange(ctx context.Context, key, serviceCIDR string) (netip.Prefix, error) {
	r.cidrMu.Lock()
	defer r.cidrMu.Unlock()
	var all fkev1.ClusterList
	if err := r.Client.List(ctx, &all); err != nil {
		return netip.Prefix{}, fmt.Errorf("listing clusters: %w", err)
	}
	hostRoutes := r.HostRoutes
	if hostRoutes == nil {
		hostRoutes = netrange.HostRoutes
	}
	avoid, err := hostRoutes()
	if err != nil {
		return netip.Prefix{}, err
	}
	for _, o := range all.Items {
		if client.ObjectKeyFromObject(&o).String() == key {
			continue
		}
		for _, c := range []string{o.Spec.Network.PodCIDR, o.Spec.Network.ServiceCIDR} {
			if p, err := netip.ParsePrefix(c); err == nil {
				avoid = append(avoid, p.Masked())
			}
		}
	}
	standby, err := r.standbyRanges(ctx)
	if err != nil {
		return netip.Prefix{}, err
	}
	avoid = append(avoid, standby...)
	if p, err := netip.ParsePrefix(serviceCIDR); err == nil {
		avoid = append(avoid, p.Masked())
	}
	for k, p := range r.picked {
		if k != key {
			avoid = append(avoid, p)
		}
	}
	pick, err := netrange.PickPodCIDR(avoid)
	if err != nil {
		return netip.Prefix{}, err
	}
	if r.picked == nil {
		r.picked = map[string]netip.Prefix{}
	}
	r.picked[key] = pick
	return pick, nil
}
