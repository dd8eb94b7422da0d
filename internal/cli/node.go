package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/nodeprovider/local"
)

// newDoctorCmd checks what local nodes need on this host.
func newDoctorCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check that this host can run local nodes (root, containerd, runc, CNI plugins, iptables, ...)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			checks := local.Checks(cmd.Context(), g.finder(), hostnet.New(nil, nil))
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CHECK\tRESULT\tFIX")
			for _, c := range checks {
				if c.Err == nil {
					fmt.Fprintf(tw, "%s\tok\t\n", c.Name)
					continue
				}
				fmt.Fprintf(tw, "%s\t%v\t%s\n", c.Name, c.Err, c.Fix)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if failed := local.Failed(checks); len(failed) > 0 {
				return fmt.Errorf("%d of %d checks failed: node pools with --provider local cannot run here until they are fixed", len(failed), len(checks))
			}
			fmt.Fprintln(g.out, "this host can run local nodes (--provider local)")
			return nil
		},
	}
}

// removeLocalNodes removes every local node recorded under dataDir and the
// host network they used (fke down): the manager only stops their
// processes when it exits, so that their containers survive a restart.
func removeLocalNodes(ctx context.Context, g *globals) error {
	if _, err := os.Stat(filepath.Join(g.dataDir, "nodes")); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	p, err := local.New(local.Options{DataDir: g.dataDir, Binaries: g.finder()})
	if err != nil {
		return err
	}
	if err := p.RemoveAll(ctx); err != nil {
		return fmt.Errorf("removing local nodes: %w", err)
	}
	return nil
}
