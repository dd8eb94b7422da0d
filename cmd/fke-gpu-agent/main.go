// Command fke-gpu-agent is fke's GPU node agent: NVML discovery, the kubelet
// device plugin, GFD-compatible node labels, XID health and DCGM-compatible
// metrics. This file only wires the internal/gpu packages together.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"github.com/spf13/cobra"
)

type options struct {
	configFile string
	kubeconfig string
	nodeAPI    bool
	logLevel   string
	logFormat  string
	output     string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	o := &options{}
	cfg := gpuconfig.Default()
	root := &cobra.Command{
		Use:           "fke-gpu-agent",
		Short:         "GPU node agent: device plugin, labels, health and metrics",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd, o, &cfg)
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&o.configFile, "config", "", "YAML config file (flags given explicitly override it)")
	f.StringVar(&cfg.Backend, "backend", cfg.Backend, "NVML backend: real or mock:<dgxa100|dgxh100|dgxh200|dgxb200>")
	f.StringVar(&cfg.NodeName, "node-name", cfg.NodeName, "this node's name (default $NODE_NAME)")
	f.StringVar((*string)(&cfg.MIGStrategy), "mig-strategy", string(cfg.MIGStrategy), "MIG strategy: none, single or mixed")
	f.StringVar((*string)(&cfg.DevicePlugin.AllocationPolicy), "allocation-policy", string(cfg.DevicePlugin.AllocationPolicy), "preferred allocation: packed or spread")
	f.StringVar((*string)(&cfg.DevicePlugin.DeviceListStrategy), "device-list-strategy", string(cfg.DevicePlugin.DeviceListStrategy), "how devices reach containers: envvar or cdi")
	f.StringVar(&cfg.DevicePlugin.DriverRoot, "driver-root", cfg.DevicePlugin.DriverRoot, "where the host's root filesystem is seen (to find the driver's device nodes and libraries)")
	f.StringVar(&cfg.DevicePlugin.CDISpecDir, "cdi-spec-dir", cfg.DevicePlugin.CDISpecDir, "where the cdi strategy writes the GPUs' CDI spec")
	f.StringVar(&cfg.DevicePlugin.Dir, "plugin-dir", cfg.DevicePlugin.Dir, "kubelet device-plugin directory")
	f.BoolVar(&cfg.DevicePlugin.Enabled, "kubelet", cfg.DevicePlugin.Enabled, "serve the kubelet device plugin (false: discovery, health and metrics only)")
	f.StringVar(&cfg.Metrics.Address, "metrics-address", cfg.Metrics.Address, "Prometheus listen address (empty disables)")
	f.StringVar(&cfg.Metrics.PodResourcesSocket, "pod-resources-socket", cfg.Metrics.PodResourcesSocket, "kubelet pod-resources socket (empty disables pod labels)")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for the Node API (default: in-cluster)")
	f.BoolVar(&o.nodeAPI, "node-api", true, "use the Kubernetes API for labels, the health condition and the allocatable self-check")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "text or json")

	run := &cobra.Command{
		Use:   "run",
		Short: "Run the agent (default)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd, o, &cfg)
		},
	}
	info := &cobra.Command{
		Use:   "info",
		Short: "Print the GPUs this node has",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := resolveConfig(cmd, o, cfg)
			if err != nil {
				return err
			}
			return printInfo(cmd.Context(), cmd.OutOrStdout(), c, o.output)
		},
	}
	info.Flags().StringVarP(&o.output, "output", "o", "table", "json or table")
	var count int
	allocate := &cobra.Command{
		Use:   "allocate",
		Short: "Print what a container allocated --count GPUs gets (devices, driver files, environment), as JSON",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := resolveConfig(cmd, o, cfg)
			if err != nil {
				return err
			}
			return printAllocation(cmd.Context(), cmd.OutOrStdout(), c, count)
		},
	}
	allocate.Flags().IntVar(&count, "count", 1, "number of devices to allocate")
	root.AddCommand(run, info, allocate)
	return root
}

// resolveConfig loads the config file (if any) and applies the flags the
// user set explicitly on top of it.
func resolveConfig(cmd *cobra.Command, o *options, flagged gpuconfig.Config) (gpuconfig.Config, error) {
	cfg := flagged
	if o.configFile != "" {
		fileCfg, err := gpuconfig.Load(o.configFile)
		if err != nil {
			return cfg, err
		}
		cfg = fileCfg
		set := func(name string, apply func()) {
			if cmd.Flags().Changed(name) {
				apply()
			}
		}
		set("backend", func() { cfg.Backend = flagged.Backend })
		set("node-name", func() { cfg.NodeName = flagged.NodeName })
		set("mig-strategy", func() { cfg.MIGStrategy = flagged.MIGStrategy })
		set("allocation-policy", func() { cfg.DevicePlugin.AllocationPolicy = flagged.DevicePlugin.AllocationPolicy })
		set("device-list-strategy", func() { cfg.DevicePlugin.DeviceListStrategy = flagged.DevicePlugin.DeviceListStrategy })
		set("driver-root", func() { cfg.DevicePlugin.DriverRoot = flagged.DevicePlugin.DriverRoot })
		set("cdi-spec-dir", func() { cfg.DevicePlugin.CDISpecDir = flagged.DevicePlugin.CDISpecDir })
		set("plugin-dir", func() { cfg.DevicePlugin.Dir = flagged.DevicePlugin.Dir })
		set("kubelet", func() { cfg.DevicePlugin.Enabled = flagged.DevicePlugin.Enabled })
		set("metrics-address", func() { cfg.Metrics.Address = flagged.Metrics.Address })
		set("pod-resources-socket", func() { cfg.Metrics.PodResourcesSocket = flagged.Metrics.PodResourcesSocket })
	}
	if cfg.NodeName == "" {
		cfg.NodeName = os.Getenv("NODE_NAME")
	}
	if cfg.NodeName == "" {
		if h, err := os.Hostname(); err == nil {
			cfg.NodeName = h
		}
	}
	if !o.nodeAPI {
		cfg.Labels.Enabled = false
	}
	if cfg.Machine == "" {
		if b, err := os.ReadFile("/sys/class/dmi/id/product_name"); err == nil {
			cfg.Machine = strings.TrimSpace(string(b))
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
}

func newLogger(o *options) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", o.logLevel, err)
	}
	ho := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, ho)), nil
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, ho)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: must be text or json", o.logFormat)
	}
}

// mockMIG converts the config's "index" → profiles map.
func mockMIG(cfg gpuconfig.Config) (map[int][]string, error) {
	out := map[int][]string{}
	for k, v := range cfg.Mock.MIG {
		i, err := strconv.Atoi(k)
		if err != nil {
			return nil, fmt.Errorf("mock.mig key %q: not a GPU index", k)
		}
		out[i] = v
	}
	return out, nil
}
