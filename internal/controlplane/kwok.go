package controlplane

import "context"

// KwokWorkloads runs a cluster's kwok as a workload of the management
// cluster, next to its hosted control plane: the hosted runtime implements
// it, the kwok node provider runs the kwok of hosted clusters through it.
type KwokWorkloads interface {
	// RunKwok makes kwok run for the cluster with key, with files (by
	// name, mounted read-only in one directory, KwokWorkloadDir) and args.
	// Idempotent: it returns once what runs it is applied, without
	// waiting for kwok to serve.
	RunKwok(ctx context.Context, key string, files map[string][]byte, args []string) error
	// StopKwok removes it; nothing to remove is no error.
	StopKwok(ctx context.Context, key string) error
}

// Where kwok finds its files and serves in a workload (see KwokWorkloads).
const (
	KwokWorkloadDir  = "/etc/kwok"
	KwokWorkloadPort = 10247
)
