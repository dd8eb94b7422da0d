package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/deviceplugin"
	"fke.dev/fke/internal/gpu/driver"
	"fke.dev/fke/internal/gpu/health"
	"fke.dev/fke/internal/gpu/labels"
	gpumetrics "fke.dev/fke/internal/gpu/metrics"
	gpunode "fke.dev/fke/internal/gpu/node"
	"fke.dev/fke/internal/gpu/nvml"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The Node status is what the device plugin checks its allocatable against.
var _ deviceplugin.AllocatableSource = gpunode.Allocatable{}

func runAgent(cmd *cobra.Command, o *options, flagged *gpuconfig.Config) error {
	log, err := newLogger(o)
	if err != nil {
		return err
	}
	cfg, err := resolveConfig(cmd, o, *flagged)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	lib, sys, devs, err := discover(ctx, cfg)
	if err != nil {
		return err
	}
	defer lib.Close()
	uuids := make([]string, len(devs))
	for i, d := range devs {
		uuids[i] = d.UUID
	}
	log.Info("GPUs discovered", "backend", cfg.Backend, "count", len(devs), "driver", sys.DriverVersion, "node", cfg.NodeName)

	var api gpunode.API
	if o.nodeAPI {
		rc, err := restConfig(o.kubeconfig)
		if err != nil {
			return fmt.Errorf("configuring the Node API (use --node-api=false to run without it): %w", err)
		}
		core, err := corev1client.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("building core/v1 client: %w", err)
		}
		api = gpunode.FromCoreV1(core)
	}

	g, ctx := errgroup.WithContext(ctx)

	var src deviceplugin.HealthSource = deviceplugin.AlwaysHealthy{}
	var xids gpumetrics.XIDSource
	if !cfg.Health.Disabled {
		var reporter health.Reporter = health.LogReporter{Log: log}
		if api != nil {
			reporter = &gpunode.Reporter{API: api, Node: cfg.NodeName}
		}
		mon := health.NewMonitor(lib, uuids, health.Options{
			Policy:        health.DefaultPolicy().WithIgnored(cfg.Health.IgnoredXIDs...),
			Hold:          cfg.Health.RecoveryHold.Duration,
			ProbeInterval: cfg.Health.ProbeInterval.Duration,
			Reporter:      reporter,
			Log:           log.With("component", "health"),
		})
		src, xids = mon, mon
		g.Go(func() error { return mon.Run(ctx) })
	}

	// What containers get with their GPUs: nothing but their UUIDs for a
	// mock backend; the host driver's devices and files for the real one.
	drv := &driver.Driver{}
	if _, mock := cfg.MockName(); !mock {
		if drv, err = driver.Discover(cfg.DevicePlugin.DriverRoot, devs); err != nil {
			return fmt.Errorf("finding the driver's files: %w", err)
		}
	}
	log.Info("driver files", "simulated", drv.Simulated(), "controlNodes", len(drv.Control), "libraries", len(drv.Libraries), "tools", len(drv.Tools))
	if cfg.DevicePlugin.Enabled && cfg.DevicePlugin.DeviceListStrategy == gpuconfig.DeviceListCDI {
		spec, err := drv.CDISpec()
		if err != nil {
			return err
		}
		if err := driver.WriteCDISpec(cfg.DevicePlugin.CDISpecDir, spec); err != nil {
			return err
		}
	}

	if cfg.DevicePlugin.Enabled {
		res, err := deviceplugin.BuildResources(devs, cfg.MIGStrategy, cfg.Sharing.TimeSlicing)
		if err != nil {
			return fmt.Errorf("deciding resources: %w", err)
		}
		mo := deviceplugin.ManagerOptions{
			Dir:      cfg.DevicePlugin.Dir,
			Policy:   cfg.DevicePlugin.AllocationPolicy,
			Strategy: cfg.DevicePlugin.DeviceListStrategy,
			Driver:   drv,
			Health:   src,
			Log:      log.With("component", "deviceplugin"),
		}
		if api != nil {
			mo.SelfCheck = gpunode.Allocatable{API: api, Node: cfg.NodeName}
			mo.SelfCheckInterval = cfg.DevicePlugin.SelfCheckInterval.Duration
		}
		mgr, err := deviceplugin.NewManager(res, deviceplugin.TopologyOf(devs), mo)
		if err != nil {
			return err
		}
		g.Go(func() error { return mgr.Run(ctx) })
	}

	if cfg.Labels.Enabled && api != nil {
		want := labels.For(sys, devs, cfg, drv.Simulated())
		l := &labels.Labeler{API: api, Node: cfg.NodeName, Log: log.With("component", "labels")}
		g.Go(func() error { return labelLoop(ctx, l, want, cfg.Labels.Interval.Duration, log) })
	}

	if cfg.Metrics.Address != "" {
		c := &gpumetrics.Collector{Sampler: lib, Devices: devs, Hostname: cfg.NodeName, XIDs: xids, Log: log.With("component", "metrics")}
		if cfg.Metrics.PodResourcesSocket != "" {
			pr, err := gpumetrics.NewPodResources(cfg.Metrics.PodResourcesSocket, cfg.Metrics.PodResourcesTTL.Duration, nil)
			if err != nil {
				return err
			}
			defer pr.Close()
			c.Owners = pr
		}
		h, err := gpumetrics.Handler(c)
		if err != nil {
			return err
		}
		if m, ok := lib.(*nvml.Mock); ok {
			h = nvml.MockControl(m, h) // simulated GPUs: XIDs and lost GPUs on request
		}
		g.Go(func() error {
			return gpumetrics.Serve(ctx, cfg.Metrics.Address, h, func(a net.Addr) {
				log.Info("metrics serving", "address", a.String())
			})
		})
	}
	log.Info("agent running", "devicePlugin", cfg.DevicePlugin.Enabled, "health", !cfg.Health.Disabled, "labels", cfg.Labels.Enabled && api != nil, "metrics", cfg.Metrics.Address)
	err = g.Wait()
	log.Info("agent stopped", "err", err)
	return err
}

// labelLoop applies the labels now and every interval (once when interval is 0);
// failures are logged and retried, never fatal.
func labelLoop(ctx context.Context, l *labels.Labeler, want map[string]string, interval time.Duration, log *slog.Logger) error {
	retry := 5 * time.Second
	for {
		wait := interval
		if err := l.Apply(ctx, want); err != nil {
			log.Warn("applying node labels", "err", err)
			wait = retry
		} else if interval <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
