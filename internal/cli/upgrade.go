package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/versions"
)

func newClusterUpgradeCmd(g *globals) *cobra.Command {
	var (
		version string
		noWait  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "upgrade NAME --version VERSION",
		Short: "Upgrade a cluster's control plane (one minor at a time; its node pools follow)",
		Long: "Sets spec.version. fke takes an etcd snapshot, then replaces kube-apiserver (the new one serves before the old one stops),\n" +
			"kube-controller-manager and kube-scheduler, applies the addons again, and then replaces the nodes of the pools that\n" +
			"follow the cluster within their surge limits. `fke versions` lists what each version can be upgraded to.",
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if version == "" {
				return fmt.Errorf("--version is required: `fke versions` lists what each version can be upgraded to")
			}
			if _, err := versions.Parse(version); err != nil {
				return fmt.Errorf("--version: %w", err)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			cl, err := g.getCluster(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			if err := versions.CheckUpgrade(cl.Spec.Version, version); err != nil {
				return err
			}
			if cl.Spec.Version != version {
				patch := client.MergeFrom(cl.DeepCopy())
				cl.Spec.Version = version
				if err := c.Patch(cmd.Context(), cl, patch); err != nil {
					return explainCluster(err, args[0])
				}
			}
			if noWait {
				fmt.Fprintf(g.out, "cluster %s: upgrade to %s requested; follow it with `fke cluster get %s`\n", args[0], version, args[0])
				return nil
			}
			return waitUpgrade(cmd.Context(), g, c, client.ObjectKeyFromObject(cl), version, timeout)
		},
	}
	cmd.Flags().StringVar(&version, "version", "", "the Kubernetes version to upgrade to")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the new version is recorded")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the control plane")
	return cmd
}

// waitUpgrade prints each step of the control-plane upgrade to version as
// it begins and returns once every component runs it.
func waitUpgrade(ctx context.Context, g *globals, c client.Client, key client.ObjectKey, version string, timeout time.Duration) error {
	start := time.Now()
	last, snapshot := "", ""
	cl := &fkev1.Cluster{}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, cl); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionUpgrading)
		up := cl.Status.Upgrade
		if up == nil || up.To != version || cond == nil {
			return false, nil
		}
		if up.Snapshot != "" && snapshot == "" {
			snapshot = up.Snapshot
			fmt.Fprintf(g.errOut, "[%5.1fs] etcd snapshot %s taken (fke cluster backups %s)\n", time.Since(start).Seconds(), snapshot, key.Name)
		}
		if cond.Message != last {
			last = cond.Message
			fmt.Fprintf(g.errOut, "[%5.1fs] %s\n", time.Since(start).Seconds(), cond.Message)
		}
		return up.CompletionTime != nil, nil
	})
	if err != nil {
		return fmt.Errorf("the control plane of %s did not reach %s within %s (last: %s); see `fke cluster get %s`: %w", key.Name, version, timeout, last, key.Name, err)
	}
	fmt.Fprintf(g.out, "cluster %s: control plane at %s; node pools that follow it are being replaced (fke nodepool list %s)\n", key.Name, version, key.Name)
	return nil
}
