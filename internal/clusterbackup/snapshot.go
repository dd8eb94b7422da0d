// Package clusterbackup is what fke knows of a Cluster's snapshots, shared
// by the cluster and backup controllers and the CLI: taking one through
// the runtime that serves the cluster, the Secret of keys that restores
// them after the cluster is gone, the S3 store they go to, and the
// status.backups records that list them.
package clusterbackup

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

// RuntimeOf returns the runtime of runtimes that serves cl's spec.runtime
// (nil: none does).
func RuntimeOf(runtimes map[fkev1.ControlPlaneRuntime]controlplane.Runtime, cl *fkev1.Cluster) controlplane.Runtime {
	name := cl.Spec.Runtime
	if name == "" {
		name = fkev1.RuntimeLocal
	}
	return runtimes[name]
}

// TakeSnapshot takes a snapshot of cl's running control plane into dir
// through its runtime rt (see controlplane.Runtime.Snapshot).
func TakeSnapshot(ctx context.Context, rt controlplane.Runtime, cl *fkev1.Cluster, bundle pki.Bundle, dir backup.Dir, now time.Time) (backup.Snapshot, error) {
	spec := controlplane.Spec{
		Key: client.ObjectKeyFromObject(cl).String(), PKI: bundle, Ports: PortsOf(cl.Status.Ports), Datastore: string(cl.Spec.Datastore),
	}
	return rt.Snapshot(ctx, spec, dir, now, string(cl.UID))
}

// PortsOf is a Cluster's status.ports as a control-plane spec's.
func PortsOf(p fkev1.ClusterPorts) controlplane.Ports {
	return controlplane.Ports{
		APIServer: int(p.APIServer), EtcdClient: int(p.EtcdClient), EtcdPeer: int(p.EtcdPeer),
		ControllerManager: int(p.ControllerManager), Scheduler: int(p.Scheduler),
	}
}
