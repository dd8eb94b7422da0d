// Command fke-gpu-metrics is fke's GPU custom-metrics adapter: it serves
// per-pod GPU metrics under the DCGM names on custom.metrics.k8s.io for a
// tenant's HorizontalPodAutoscalers. fke-manager runs it beside the tenant
// control plane (the gpuMetrics addon). This file only wires
// internal/gpumetrics to sigs.k8s.io/custom-metrics-apiserver.
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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"

	"fke.dev/fke/internal/gpumetrics"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func run() error {
	adapter := &basecmd.AdapterBase{Name: "fke-gpu-metrics", FlagSet: pflag.NewFlagSet("fke-gpu-metrics", pflag.ContinueOnError)}
	agents := &gpumetrics.Agents{Clock: clock.RealClock{}, Log: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
	var selector string
	fs := adapter.Flags()
	fs.StringVar(&agents.Namespace, "agent-namespace", "kube-system", "namespace of the fke-gpu-agent pods")
	fs.StringVar(&selector, "agent-selector", "app.kubernetes.io/name=fke-gpu-agent", "label selector of the fke-gpu-agent pods")
	fs.IntVar(&agents.Port, "agent-port", 9400, "metrics port of the fke-gpu-agent pods")
	fs.DurationVar(&agents.Interval, "agent-scrape-interval", 5*time.Second, "how often the agents are scraped")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return fmt.Errorf("--agent-selector: %w", err)
	}
	agents.Selector = sel

	inf, err := adapter.Informers()
	if err != nil {
		return err
	}
	listers := gpumetrics.Listers{
		Pods:         inf.Core().V1().Pods().Lister(),
		Nodes:        inf.Core().V1().Nodes().Lister(),
		ReplicaSets:  inf.Apps().V1().ReplicaSets().Lister(),
		Deployments:  inf.Apps().V1().Deployments().Lister(),
		StatefulSets: inf.Apps().V1().StatefulSets().Lister(),
	}
	agents.Lister = listers.Pods
	adapter.WithCustomMetrics(&gpumetrics.Provider{Listers: listers, Scraped: agents, Clock: clock.RealClock{}})

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	go agents.Run(ctx)
	return adapter.Run(ctx)
}
