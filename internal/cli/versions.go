package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"fke.dev/fke/internal/versions"
)

// newVersionsCmd prints the Kubernetes versions this fke runs.
func newVersionsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "versions",
		Short: "List the Kubernetes versions clusters may run (newest last; the default is marked)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, v := range versions.Supported() {
				if v == versions.Default {
					fmt.Fprintf(g.out, "%s (default)\n", v)
					continue
				}
				fmt.Fprintln(g.out, v)
			}
			return nil
		},
	}
}
