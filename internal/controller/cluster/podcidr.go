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

// ensurePodCIDR picks a pod range for a cluster that has none and records
// it in the cluster's spec (set once): a range that overlaps no route of
// this host, no pod or service range of any cluster, and none picked by a
// concurrent reconcile whose write the cache has not shown yet.
func (r *Reconciler) ensurePodCIDR(ctx context.Context, cl *fkev1.Cluster) error {
	if cl.Spec.Network.PodCIDR != "" {
		return nil
	}
	r.cidrMu.Lock()
	defer r.cidrMu.Unlock()
	key := client.ObjectKeyFromObject(cl).String()
	var all fkev1.ClusterList
	if err := r.Client.List(ctx, &all); err != nil {
		return fmt.Errorf("listing clusters: %w", err)
	}
	hostRoutes := r.HostRoutes
	if hostRoutes == nil {
		hostRoutes = netrange.HostRoutes
	}
	avoid, err := hostRoutes()
	if err != nil {
		return err
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
	if p, err := netip.ParsePrefix(cl.Spec.Network.ServiceCIDR); err == nil {
		avoid = append(avoid, p.Masked())
	}
	for k, p := range r.picked {
		if k != key {
			avoid = append(avoid, p)
		}
	}
	pick, err := netrange.PickPodCIDR(avoid)
	if err != nil {
		return err
	}
	before := cl.DeepCopy()
	cl.Spec.Network.PodCIDR = pick.String()
	if err := r.Client.Patch(ctx, cl, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("recording pod range %s: %w", pick, err)
	}
	if r.picked == nil {
		r.picked = map[string]netip.Prefix{}
	}
	r.picked[key] = pick
	r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "PodCIDRChosen", "Provision", "pod range %s chosen: it overlaps no host route and no other cluster", pick)
	return nil
}
