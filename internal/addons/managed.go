package addons

import (
	"context"

	"k8s.io/client-go/rest"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

// Managed is an addon a Cluster turns on or off in spec.addons and fke runs
// for it: a process beside the control plane (see controlplane.Addon) and
// the objects in the tenant cluster that make its API server use it. The
// cluster controller calls Process, Install and Serving on every pass while
// the addon is enabled, and Remove until it succeeds once it is disabled.
// (Processes, not Process, is called: an addon may run several.)
type Managed interface {
	// Name is the addon's name in status.addons, e.g. metrics-server.
	Name() string
	// Version is the upstream version fke runs.
	Version() string
	// Enabled reports whether cl asks for the addon.
	Enabled(cl *fkev1.Cluster) bool
	// Processes returns the processes to run beside cl's control plane,
	// connected as n says (the runtime's AddonNetwork), whose PKI is b;
	// their names are unique among the cluster's addons. It fails when cl
	// lacks what they need (a port, a certificate) or the addon cannot run
	// on n. Pure.
	Processes(cl *fkev1.Cluster, n controlplane.AddonNetwork, b pki.Bundle) ([]controlplane.Addon, error)
	// Install creates or repairs the addon's objects in the tenant at cfg,
	// pointing its API server at the processes on n. Idempotent; cheap
	// when everything is in place.
	Install(ctx context.Context, cfg *rest.Config, cl *fkev1.Cluster, b pki.Bundle, n controlplane.AddonNetwork) error
	// Serving reports whether the tenant's API server reaches the addon,
	// and if not, why (a message for status).
	Serving(ctx context.Context, cfg *rest.Config) (ok bool, why string, err error)
	// Remove deletes the addon's objects from the tenant at cfg.
	// Idempotent: objects already gone are no error.
	Remove(ctx context.Context, cfg *rest.Config) error
}

// one is Processes of an addon that runs a single process.
func one(p controlplane.Addon, err error) ([]controlplane.Addon, error) {
	if err != nil {
		return nil, err
	}
	return []controlplane.Addon{p}, nil
}
