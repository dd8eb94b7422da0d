// Command fke-manager runs fke's controllers against a management API server
// (the same controllers `fke up` runs).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/localplane"
	"fke.dev/fke/internal/manager"
)

func main() {
	var opts manager.Options
	var binDir string
	flag.StringVar(&opts.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the management API")
	flag.StringVar(&opts.DataDir, "data-dir", localplane.DefaultDataDir(), "directory for tenant control-plane data")
	flag.StringVar(&binDir, "bin-dir", os.Getenv(binaries.EnvDir), "directory of the upstream binaries")
	flag.StringVar(&opts.HealthAddr, "health-addr", ":8081", "address of /healthz and /readyz")
	flag.StringVar(&opts.MetricsAddr, "metrics-addr", ":8080", "address of /metrics (0 disables)")
	flag.IntVar(&opts.Webhook.Port, "webhook-port", 0, "port of the admission webhook on 127.0.0.1, which the management API server must reach (0 disables it)")
	flag.StringVar(&opts.Webhook.CertDir, "webhook-cert-dir", "", "directory of the webhook's CA and serving certificate (default <data-dir>/webhook-pki)")
	flag.StringVar(&opts.NodeAddress, "node-address", "", "host address nodes reach tenant API servers at (empty: loopback only)")
	flag.StringVar(&opts.Registry, "registry", "", "loopback address of fke's OCI registry (host:port)")
	flag.IntVar(&opts.WarmPool.Size, "warm-pool", 0, "standby control planes kept started for new clusters of the default version (0: none)")
	flag.StringVar(&opts.WarmPool.Namespace, "warm-pool-namespace", manager.DefaultSystemNamespace, "namespace of the standby planes' Secrets and the pool's status")
	flag.BoolVar(&opts.LeaderElection.Enabled, "leader-elect", false, "elect a leader among manager replicas with a Lease (the Helm chart turns it on)")
	flag.StringVar(&opts.LeaderElection.Namespace, "leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's namespace)")
	runtimes := flag.String("runtimes", manager.JoinNames(manager.Runtimes), "comma-separated control-plane runtimes to run (empty: none)")
	providers := flag.String("providers", manager.JoinNames(manager.Providers), "comma-separated node providers to run (empty: none)")
	flag.Parse()
	var err error
	if opts.Runtimes, err = manager.ParseRuntimes(*runtimes); err != nil {
		fmt.Fprintln(os.Stderr, "Error: --runtimes:", err)
		os.Exit(2)
	}
	if opts.Providers, err = manager.ParseProviders(*providers); err != nil {
		fmt.Fprintln(os.Stderr, "Error: --providers:", err)
		os.Exit(2)
	}
	opts.Binaries = binaries.Finder{Dir: binDir}
	opts.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := manager.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
