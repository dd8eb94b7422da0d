package cluster

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
)

// portFields lists the loopback ports of a cluster, in allocation order.
func portFields(p *fkev1.ClusterPorts) []*int32 {
	return []*int32{&p.APIServer, &p.EtcdClient, &p.EtcdPeer, &p.ControllerManager, &p.Scheduler, &p.MetricsServer, &p.GPUMetrics, &p.VPAWebhook}
}

// ensurePorts allocates the cluster's loopback ports once and persists them in
// status right away, so a restarted manager reuses them (same endpoint); a
// cluster of another runtime gets its addons' ports in their pods.
// Ports added by a later fke (metrics-server's, the GPU metrics adapter's, the VPA webhook's) are allocated for existing
// clusters the same way, leaving the others as they are.
func (r *Reconciler) ensurePorts(ctx context.Context, cl *fkev1.Cluster) error {
	var want fkev1.ClusterPorts
	var err error
	if r.runtime(cl) == r.local() {
		want, err = r.allocatePorts(ctx, cl.Status.Ports, false)
	} else {
		// Other runtimes own the control plane's addressing and run each
		// addon in pods of its own, where it listens on a fixed port.
		want = podAddonPorts(cl.Status.Ports)
	}
	if err != nil || want == cl.Status.Ports {
		return err
	}
	before := cl.DeepCopy()
	cl.Status.Ports = want
	if err := r.Client.Status().Patch(ctx, cl, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("recording ports: %w", err)
	}
	return nil
}

// recentPortsFor is how long a port handed out stays taken in memory.
const recentPortsFor = 10 * time.Minute

// allocatePorts returns have with its zero ports (only those of the four
// control-plane components with controlPlaneOnly) set to free loopback
// ports that no cluster and no standby plane uses.
func (r *Reconciler) allocatePorts(ctx context.Context, have fkev1.ClusterPorts, controlPlaneOnly bool) (fkev1.ClusterPorts, error) {
	want := have
	fields := portFields(&want)
	if controlPlaneOnly {
		fields = fields[:5]
	}
	var missing []*int32
	for _, f := range fields {
		if *f == 0 {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 {
		return want, nil
	}
	r.portsMu.Lock()
	defer r.portsMu.Unlock()
	var all fkev1.ClusterList
	if err := r.Client.List(ctx, &all); err != nil {
		return have, fmt.Errorf("listing clusters: %w", err)
	}
	taken := map[int32]bool{}
	for _, c := range all.Items {
		for _, port := range portFields(&c.Status.Ports) {
			taken[*port] = true
		}
	}
	standby, err := r.standbySecrets(ctx)
	if err != nil {
		return have, err
	}
	for i := range standby {
		if p, err := planePorts(&standby[i]); err == nil {
			for _, port := range portFields(&p) {
				taken[*port] = true
			}
		}
	}
	for _, port := range portFields(&want) {
		taken[*port] = true
	}
	// Ports handed out a moment ago: the cache may not show the status
	// that records them yet, and their processes may not listen yet (a
	// controller manager starts once its API server serves, minutes later
	// on a loaded machine), so the listing and FreePorts both miss them.
	now := time.Now()
	for port, at := range r.recentPorts {
		if now.Sub(at) > recentPortsFor {
			delete(r.recentPorts, port)
			continue
		}
		taken[port] = true
	}
	var ports []int32
	n := len(missing)
	for attempt := 0; len(ports) < n && attempt < 20; attempt++ {
		free, err := supervisor.FreePorts(n)
		if err != nil {
			return have, fmt.Errorf("finding free ports: %w", err)
		}
		for _, p := range free {
			if !taken[int32(p)] && len(ports) < n {
				taken[int32(p)] = true
				ports = append(ports, int32(p))
			}
		}
	}
	if len(ports) < n {
		return have, fmt.Errorf("could not find %d free loopback ports", n)
	}
	if r.recentPorts == nil {
		r.recentPorts = map[int32]time.Time{}
	}
	for i, f := range missing {
		*f = ports[i]
		r.recentPorts[ports[i]] = now
	}
	return want, nil
}

// ensurePKI loads the cluster's PKI Secret, completes it, and writes it back
// when anything was added or renewed. The CAs never change once created.
func (r *Reconciler) ensurePKI(ctx context.Context, cl *fkev1.Cluster) (pki.Bundle, error) {
	addrs, err := r.runtime(cl).Addresses(ctx, controlplane.Spec{
		Key: client.ObjectKeyFromObject(cl).String(), ServiceCIDR: cl.Spec.Network.ServiceCIDR, NodeAddress: r.NodeAddress,
		Datastore: string(cl.Spec.Datastore),
	})
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: cl.Namespace, Name: fkev1.PKISecretName(cl.Name)}
	exists := true
	if err := r.Client.Get(ctx, key, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("getting PKI secret: %w", err)
		}
		exists = false
	}
	seed := pki.Bundle(secret.Data)
	if !exists && cl.Spec.RestoreFrom != nil {
		// A cluster made from a backup takes the CAs and keys of the
		// cluster the snapshot was taken of: its objects (service-account
		// tokens, Secrets encrypted at rest) are only valid with them.
		src, err := r.restoreSeed(ctx, cl)
		if err != nil {
			return nil, err
		}
		seed = src
	}
	bundle, changed, err := pki.EnsureBundle(seed, pki.ControlPlaneSpec{
		ClusterName:       cl.Name,
		APIServerIPs:      addrs.APIServerIPs,
		APIServerDNSNames: addrs.APIServerDNSNames,
		EtcdDNSNames:      addrs.EtcdDNSNames,
	})
	if err != nil {
		return nil, fmt.Errorf("ensuring PKI: %w", err)
	}
	// The tenant's encryption key travels with its PKI: the Secret is
	// encrypted at rest by the management API server, and the key can be
	// recovered from it when the cluster's data directory cannot.
	enc, encChanged, err := encryption.Ensure(bundle[encryption.ConfigFile])
	if err != nil {
		return nil, fmt.Errorf("secret %s, key %s: %w", fkev1.PKISecretName(cl.Name), encryption.ConfigFile, err)
	}
	bundle[encryption.ConfigFile] = enc
	changed = changed || encChanged
	if !changed && exists {
		return bundle, nil
	}
	desired := ownedSecret(cl, fkev1.PKISecretName(cl.Name), bundle)
	if err := r.writeSecret(ctx, exists, secret, desired); err != nil {
		return nil, fmt.Errorf("writing PKI secret: %w", err)
	}
	switch {
	case !exists && cl.Spec.RestoreFrom != nil:
		r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "PKICreated", "Provision", "took the CAs and keys of cluster %s (restored from its snapshot) into Secret %s", cl.Spec.RestoreFrom.Cluster, desired.Name)
	case !exists:
		r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "PKICreated", "Provision", "created cluster CA and certificates in Secret %s", desired.Name)
	}
	return bundle, nil
}

// ensureKubeconfig writes the admin kubeconfig Secret and returns the kubeconfig.
func (r *Reconciler) ensureKubeconfig(ctx context.Context, cl *fkev1.Cluster, b pki.Bundle, endpoint string) ([]byte, error) {
	kc, err := pki.Kubeconfig(cl.Name, endpoint, b[pki.CACertFile], b[pki.AdminCertFile], b[pki.AdminKeyFile], pki.AdminUser)
	if err != nil {
		return nil, fmt.Errorf("rendering kubeconfig: %w", err)
	}
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: cl.Namespace, Name: fkev1.KubeconfigSecretName(cl.Name)}
	exists := true
	if err := r.Client.Get(ctx, key, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("getting kubeconfig secret: %w", err)
		}
		exists = false
	}
	if exists && bytes.Equal(secret.Data[fkev1.KubeconfigKey], kc) {
		return kc, nil
	}
	desired := ownedSecret(cl, fkev1.KubeconfigSecretName(cl.Name), map[string][]byte{fkev1.KubeconfigKey: kc})
	if err := r.writeSecret(ctx, exists, secret, desired); err != nil {
		return nil, fmt.Errorf("writing kubeconfig secret: %w", err)
	}
	return kc, nil
}

func (r *Reconciler) writeSecret(ctx context.Context, exists bool, current, desired *corev1.Secret) error {
	if !exists {
		return r.Client.Create(ctx, desired)
	}
	current.Data = desired.Data
	if current.Labels == nil {
		current.Labels = map[string]string{}
	}
	maps.Copy(current.Labels, desired.Labels)
	return r.Client.Update(ctx, current)
}

func ownedSecret(cl *fkev1.Cluster, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       cl.Namespace,
			Name:            name,
			Labels:          map[string]string{fkev1.LabelCluster: cl.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cl, fkev1.GroupVersion.WithKind("Cluster"))},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// Ports of the addons in their pods (a runtime that runs them in pods):
// metrics-server's and the custom metrics adapter's as upstream's
// manifests set them.
const (
	podMetricsServerPort = 10250
	podGPUMetricsPort    = 6443
	podVPAWebhookPort    = 8000
)

// podAddonPorts returns p with the addons' ports of a runtime that runs
// them in pods, where not set yet.
func podAddonPorts(p fkev1.ClusterPorts) fkev1.ClusterPorts {
	for _, f := range []struct {
		port *int32
		want int32
	}{{&p.MetricsServer, podMetricsServerPort}, {&p.GPUMetrics, podGPUMetricsPort}, {&p.VPAWebhook, podVPAWebhookPort}} {
		if *f.port == 0 {
			*f.port = f.want
		}
	}
	return p
}
