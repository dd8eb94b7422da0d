package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"fke.dev/fke/internal/versions"
)

// versionInfo is one row of `fke versions`.
type versionInfo struct {
	Version    string   `json:"version"`
	Default    bool     `json:"default"`
	UpgradesTo []string `json:"upgradesTo"`
}

// newVersionsCmd prints the Kubernetes versions this fke runs and what each
// may be upgraded to.
func newVersionsCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "versions",
		Short: "List the Kubernetes versions clusters may be created on (oldest first) and what each can be upgraded to",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rows []versionInfo
			for _, v := range versions.Supported() {
				rows = append(rows, versionInfo{Version: v, Default: v == versions.Default, UpgradesTo: versions.UpgradeTargets(v)})
			}
			if output != "" {
				return printObject(g.out, output, rows)
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tDEFAULT\tUPGRADES TO")
			for _, r := range rows {
				def, to := "", "-"
				if r.Default {
					def = "yes"
				}
				if len(r.UpgradesTo) > 0 {
					to = strings.Join(r.UpgradesTo, ", ")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Version, def, to)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
	return cmd
}
