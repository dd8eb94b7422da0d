// Command fke-vpa runs the upstream Vertical Pod Autoscaler (recommender,
// updater and admission controller, k8s.io/autoscaler/vertical-pod-autoscaler)
// for one tenant cluster, in one process; fke-manager runs it beside the
// tenant control plane (the verticalPodAutoscaler addon). Its only listener
// is the admission webhook, on loopback, for callers with an allowed client
// certificate. This file only parses flags; see internal/vpa.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"fke.dev/fke/internal/vpa"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg vpa.Config
	fs := pflag.NewFlagSet("fke-vpa", pflag.ContinueOnError)
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig of the tenant API server, with the VPA's credentials")
	fs.DurationVar(&cfg.Interval, "interval", time.Minute, "how often the recommender fetches usage and the updater looks for pods to update")
	fs.StringVar(&cfg.StatusLeaseNamespace, "status-lease-namespace", "kube-system", "namespace of the admission controller's status Lease")
	fs.StringVar(&cfg.Webhook.Address, "webhook-address", "", "host:port the admission webhook listens on: a loopback IP, or 0.0.0.0 in a pod of its own")
	fs.StringVar(&cfg.Webhook.CertFile, "tls-cert-file", "", "the webhook's serving certificate (PEM)")
	fs.StringVar(&cfg.Webhook.KeyFile, "tls-private-key-file", "", "the webhook's serving key (PEM)")
	fs.StringVar(&cfg.Webhook.ClientCAFile, "client-ca-file", "", "CA (PEM) that must sign every caller's client certificate")
	fs.StringSliceVar(&cfg.Webhook.AllowedClients, "allowed-clients", nil, "common names of the client certificates that may call the webhook")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	return vpa.Run(ctx, cfg)
}
