package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/controller/cluster"
	"fke.dev/fke/internal/managementplane"
	"fke.dev/fke/internal/manager"
)

func newUpCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	var warm int
	var oneProcess bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the local management plane in the background",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if warm < 0 {
				return fmt.Errorf("--warm-pool %d: the number of standby control planes cannot be negative (0 turns the pool off)", warm)
			}
			// Fail early, with the fix, when the upstream binaries are missing.
			if _, err := g.finder().Paths(binaries.Etcd, binaries.KubeAPIServer, binaries.KubeControllerManager, binaries.KubeScheduler); err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			var env []string
			if g.binDir != "" {
				env = append(env, binaries.EnvDir+"="+g.binDir)
			}
			fmt.Fprintf(g.out, "Starting the fke management plane in %s\n", g.dataDir)
			st, started, err := managementplane.Up(cmd.Context(), managementplane.UpOptions{
				DataDir: g.dataDir, Self: self, Env: env, Timeout: timeout, Progress: g.out, WarmPool: warm,
				OneProcessPlanes: oneProcess,
			})
			if err != nil {
				return err
			}
			if !started {
				fmt.Fprintf(g.out, "fke is already running (pid %d, API %s)\n", st.PID, st.Endpoint)
			} else {
				fmt.Fprintf(g.out, "fke is ready (pid %d, API %s)\n", st.PID, st.Endpoint)
			}
			fmt.Fprintf(g.out, `
Next:
  fke cluster create demo --wait
  fke kubeconfig demo > demo.kubeconfig
  kubectl --kubeconfig %s get clusters
`, st.Kubeconfig)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Minute, "how long to wait for the management plane")
	cmd.Flags().IntVar(&warm, "warm-pool", 1, "standby control planes kept started for new clusters of the default version (0 turns the pool off); each holds about the memory of an idle cluster")
	cmd.Flags().BoolVar(&oneProcess, "one-process-planes", true, manager.OneProcessPlanesUsage)
	return cmd
}

func newDownCmd(g *globals) *cobra.Command {
	var purge bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the local management plane and every cluster it runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := managementplane.Down(cmd.Context(), g.dataDir, false)
			if rerr := removeLocalNodes(cmd.Context(), g); rerr != nil {
				return rerr
			}
			if purge {
				if perr := os.RemoveAll(g.dataDir); perr != nil {
					return fmt.Errorf("removing %s: %w", g.dataDir, perr)
				}
				if errors.Is(err, managementplane.ErrNotRunning) {
					fmt.Fprintf(g.out, "removed %s\n", g.dataDir)
					return nil
				}
			}
			switch {
			case errors.Is(err, managementplane.ErrNotRunning):
				fmt.Fprintf(g.out, "fke is not running in %s\n", g.dataDir)
				return nil
			case err != nil:
				return err
			}
			fmt.Fprintln(g.out, "fke stopped")
			if purge {
				fmt.Fprintf(g.out, "removed %s\n", g.dataDir)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the data directory (every cluster's data and certificates)")
	return cmd
}

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the local management plane",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := managementplane.ReadState(g.dataDir)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.out, "fke %s (pid %d) in %s\nAPI:        %s\nKubeconfig: %s\n", st.Phase, st.PID, g.dataDir, st.Endpoint, st.Kubeconfig)
			if st.Registry != "" {
				fmt.Fprintf(g.out, "Registry:   %s\n\n", st.Registry)
			} else {
				fmt.Fprintf(g.out, "Registry:   not running (%s)\n\n", st.RegistryError)
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "COMPONENT\tPID\tREADY\tRESTARTS\tMEMORY")
			for _, c := range st.Components {
				mem := "-"
				if b, ok := managementplane.RSS(c.PID); ok {
					mem = fmt.Sprintf("%d MiB", b>>20)
				}
				fmt.Fprintf(tw, "%s\t%d\t%t\t%s\t%s\n", c.Name, c.PID, c.Ready, strconv.Itoa(c.Restarts), mem)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(g.out, "\nWarm pool:  %s\n", g.warmPoolLine(cmd.Context()))
			return nil
		},
	}
}

// newDaemonCmd is the background process `fke up` starts.
func newDaemonCmd(g *globals) *cobra.Command {
	var warm int
	var oneProcess bool
	cmd := &cobra.Command{
		Use:    "daemon",
		Short:  "Run the management plane in the foreground (what `fke up` starts)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			return managementplane.Daemon(cmd.Context(), managementplane.DaemonOptions{
				DataDir: g.dataDir, Binaries: g.finder(), Self: self, Logger: newLogger(g.errOut), WarmPool: warm,
				OneProcessPlanes: oneProcess,
			})
		},
	}
	cmd.Flags().IntVar(&warm, "warm-pool", 0, "standby control planes fke-manager keeps")
	cmd.Flags().BoolVar(&oneProcess, "one-process-planes", false, manager.OneProcessPlanesUsage)
	return cmd
}

// newManagerCmd runs fke-manager (the daemon starts it).
func newManagerCmd(g *globals) *cobra.Command {
	var kubeconfig, healthAddr, metricsAddr, nodeAddress, registry, holder string
	var hook manager.WebhookOptions
	var warm cluster.WarmPool
	var oneProcess bool
	cmd := &cobra.Command{
		Use:    "manager",
		Short:  "Run fke-manager (the controllers) against a management API",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return manager.Run(cmd.Context(), manager.Options{
				Kubeconfig: kubeconfig, DataDir: g.dataDir, Binaries: g.finder(),
				HealthAddr: healthAddr, MetricsAddr: metricsAddr, Webhook: hook, NodeAddress: nodeAddress, Registry: registry,
				WarmPool: warm, OneProcessPlanes: oneProcess, ProcessHolder: holder, Logger: newLogger(g.errOut),
			})
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the management API")
	cmd.Flags().StringVar(&healthAddr, "health-addr", "127.0.0.1:0", "address of /healthz and /readyz")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "0", "address of /metrics (0 disables)")
	cmd.Flags().IntVar(&hook.Port, "webhook-port", 0, "port of the admission webhook on 127.0.0.1 (0 disables it)")
	cmd.Flags().StringVar(&hook.CertDir, "webhook-cert-dir", "", "directory of the webhook's CA and serving certificate (default <data-dir>/webhook-pki)")
	cmd.Flags().StringVar(&nodeAddress, "node-address", "", "host address nodes reach tenant API servers at (empty: loopback only)")
	cmd.Flags().StringVar(&registry, "registry", "", "loopback address of fke's OCI registry (host:port)")
	cmd.Flags().IntVar(&warm.Size, "warm-pool", 0, "standby control planes kept started for new clusters of the default version (0: none)")
	cmd.Flags().StringVar(&warm.Namespace, "warm-pool-namespace", manager.DefaultSystemNamespace, "namespace of the standby planes' Secrets and the pool's status")
	cmd.Flags().BoolVar(&oneProcess, "one-process-planes", false, manager.OneProcessPlanesUsage)
	cmd.Flags().StringVar(&holder, "process-holder", "", "socket of the daemon that holds tenant control-plane processes across restarts of this manager (empty: they end with it)")
	_ = cmd.MarkFlagRequired("kubeconfig")
	return cmd
}

// warmPoolLine describes the warm pool from the status fke-manager keeps.
func (g *globals) warmPoolLine(ctx context.Context) string {
	c, err := g.client()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: manager.DefaultSystemNamespace, Name: cluster.PoolStatusConfigMap}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return "not reported yet"
		}
		return "unknown (" + err.Error() + ")"
	}
	d := cm.Data
	if d["size"] == "0" && d["ready"] == "0" && d["starting"] == "0" {
		return "off (fke up --warm-pool N keeps N standby control planes)"
	}
	return fmt.Sprintf("%s of %s standby control planes ready, %s starting (%s); new clusters of that version claim one", d["ready"], d["size"], d["starting"], d["version"])
}
