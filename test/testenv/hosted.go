package testenv

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/controlplane/hosted"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/versions"
)

// HostedPlane is a tenant control plane of the hosted runtime, made as the
// cluster controller makes one.
type HostedPlane struct {
	Key, Datastore string
	Bundle         pki.Bundle
	// Config and Clientset act as the tenant's admin.
	Config    *rest.Config
	Clientset kubernetes.Interface
	// Ready is the time from the first call to the runtime to /readyz.
	Ready time.Duration
}

// CreateHostedPlane does what the cluster controller does for a new
// Cluster of the hosted runtime: the runtime's addresses, the PKI for
// them, then Ensure until every component is ready and the endpoint
// answers /readyz, or ctx ends.
func CreateHostedPlane(ctx context.Context, rt *hosted.Runtime, key, datastore string) (*HostedPlane, error) {
	return RestoreHostedPlane(ctx, rt, key, datastore, nil, "")
}

// hostedSpec is the Spec of the tests' hosted planes, without its PKI.
func hostedSpec(key, datastore string) controlplane.Spec {
	return controlplane.Spec{Key: key, Version: versions.Default, PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16", Datastore: datastore}
}

// EnsureHostedPlane calls Ensure for p once, as the cluster controller
// does at every reconcile of a running cluster.
func EnsureHostedPlane(ctx context.Context, rt *hosted.Runtime, p *HostedPlane) (controlplane.Status, error) {
	spec := hostedSpec(p.Key, p.Datastore)
	spec.PKI = p.Bundle
	return rt.Ensure(ctx, spec)
}

// RestoreHostedPlane is CreateHostedPlane for a Cluster made from a
// snapshot: its PKI starts from seed (the CAs and keys of the cluster the
// snapshot was taken of), and every Ensure passes snapshot (a file) as the
// data to restore.
func RestoreHostedPlane(ctx context.Context, rt *hosted.Runtime, key, datastore string, seed pki.Bundle, snapshot string) (*HostedPlane, error) {
	p := &HostedPlane{Key: key, Datastore: datastore}
	start := time.Now()
	spec := hostedSpec(key, datastore)
	spec.Restore = snapshot
	addrs, err := rt.Addresses(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("%s: addresses: %w", key, err)
	}
	b, _, err := pki.EnsureBundle(seed, pki.ControlPlaneSpec{
		ClusterName: key, APIServerIPs: addrs.APIServerIPs, APIServerDNSNames: addrs.APIServerDNSNames, EtcdDNSNames: addrs.EtcdDNSNames,
	})
	if err == nil {
		b[encryption.ConfigFile], _, err = encryption.Ensure(b[encryption.ConfigFile])
	}
	if err != nil {
		return nil, fmt.Errorf("%s: PKI: %w", key, err)
	}
	spec.PKI, p.Bundle = b, b
	var st controlplane.Status
	for {
		if st, err = rt.Ensure(ctx, spec); err == nil && st.Ready() {
			break
		}
		// As the cluster controller: a queued plane asks less often.
		every := 500 * time.Millisecond
		if st.Queued != "" {
			every = 2 * time.Second
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s not ready: %+v, last error %v", key, st, err)
		case <-time.After(every):
		}
	}
	kc, err := pki.Kubeconfig(key, st.Endpoint, b[pki.CACertFile], b[pki.AdminCertFile], b[pki.AdminKeyFile], pki.AdminUser)
	if err == nil {
		p.Config, err = clientcmd.RESTConfigFromKubeConfig(kc)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	for Readyz(p.Config) != nil {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %s does not answer /readyz: %v", key, st.Endpoint, Readyz(p.Config))
		case <-time.After(100 * time.Millisecond):
		}
	}
	p.Ready = time.Since(start)
	p.Clientset, err = kubernetes.NewForConfig(p.Config)
	return p, err
}
