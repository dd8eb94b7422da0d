// Command fke-manager runs fke's controllers against a management API server
// (the same controllers `fke up` runs); the Helm chart charts/fke runs it
// as a Deployment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/controlplane/hosted"
	"fke.dev/fke/internal/managementplane"
	"fke.dev/fke/internal/manager"
)

func main() {
	opts, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(2)
	}
	opts.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := manager.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

// parseFlags parses the command line into the manager's options. It uses
// its own flag set: controller-runtime registers a "kubeconfig" flag of its
// own on the global one.
func parseFlags(args []string) (manager.Options, error) {
	var opts manager.Options
	fs := flag.NewFlagSet("fke-manager", flag.ContinueOnError)
	var binDir, runtimes, providers string
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the management API (empty: the pod's service account)")
	fs.StringVar(&opts.DataDir, "data-dir", managementplane.DefaultDataDir(), "directory for tenant control-plane data")
	fs.StringVar(&binDir, "bin-dir", os.Getenv(binaries.EnvDir), "directory of the upstream binaries")
	fs.StringVar(&opts.HealthAddr, "health-addr", ":8081", "address of /healthz and /readyz")
	fs.StringVar(&opts.MetricsAddr, "metrics-addr", ":8080", "address of /metrics (0 disables)")
	fs.IntVar(&opts.Webhook.Port, "webhook-port", 0, "port of the admission webhook on 127.0.0.1, which the management API server must reach (0 disables it)")
	fs.StringVar(&opts.Webhook.CertDir, "webhook-cert-dir", "", "directory of the webhook's CA and serving certificate (default <data-dir>/webhook-pki)")
	fs.StringVar(&opts.NodeAddress, "node-address", "", "host address nodes reach tenant API servers at (empty: loopback only)")
	fs.StringVar(&opts.Registry, "registry", "", "loopback address of fke's OCI registry (host:port)")
	fs.IntVar(&opts.WarmPool.Size, "warm-pool", 0, "standby control planes kept started for new clusters of the default version (0: none)")
	fs.StringVar(&opts.WarmPool.Namespace, "warm-pool-namespace", manager.DefaultSystemNamespace, "namespace of the standby planes' Secrets and the pool's status")
	fs.BoolVar(&opts.OneProcessPlanes, "one-process-planes", false, manager.OneProcessPlanesUsage)
	fs.BoolVar(&opts.LeaderElection.Enabled, "leader-elect", false, "elect a leader among manager replicas with the Lease "+manager.LeaderElectionID+" (the Helm chart turns it on)")
	fs.StringVar(&opts.LeaderElection.Namespace, "leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's namespace)")
	fs.StringVar(&runtimes, "runtimes", manager.JoinNames(manager.DefaultRuntimes), "comma-separated control-plane runtimes to run: "+manager.JoinNames(manager.Runtimes)+" (empty: none)")
	fs.StringVar(&opts.Hosted.Kubeconfig, "hosted-kubeconfig", "", "kubeconfig of the cluster the hosted runtime runs control planes in (empty: the management cluster)")
	fs.StringVar(&opts.Hosted.Registry, "hosted-registry", "", "registry of the hosted runtime's control-plane images, <registry>/kube-apiserver:<version> ... (`fke image push-control-plane` fills fke's)")
	fs.StringVar(&opts.Hosted.EndpointHost, "hosted-endpoint-host", "", "address users and nodes reach the hosting cluster's node ports at (empty: its first Ready node's InternalIP)")
	fs.StringVar(&opts.Hosted.SystemNamespace, "hosted-system-namespace", manager.DefaultSystemNamespace, "namespace of the hosted runtime's shared etcd")
	fs.IntVar(&opts.Hosted.MaxStarting, "hosted-max-starting", hosted.DefaultMaxStarting, "how many hosted control planes start at once (the others queue, oldest first; -1: no bound)")
	fs.StringVar(&providers, "providers", manager.JoinNames(manager.Providers), "comma-separated node providers to run (empty: none)")
	if err := fs.Parse(args); err != nil {
		return opts, err
	}
	if fs.NArg() > 0 {
		return opts, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	opts.Binaries = binaries.Finder{Dir: binDir}
	var err error
	if opts.Runtimes, err = manager.ParseRuntimes(runtimes); err != nil {
		return opts, fmt.Errorf("--runtimes: %w", err)
	}
	if slices.Contains(opts.Runtimes, fkev1.RuntimeHosted) && opts.Hosted.Registry == "" {
		return opts, errors.New("--runtimes=hosted needs --hosted-registry: the registry the hosting cluster pulls the control-plane images from")
	}
	if opts.Providers, err = manager.ParseProviders(providers); err != nil {
		return opts, fmt.Errorf("--providers: %w", err)
	}
	return opts, nil
}
