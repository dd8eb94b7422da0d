package cli

import (
	"cmp"
	"errors"
	"fmt"
	"runtime/debug"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"fke.dev/fke/internal/binaries"
)

// fkeVersion is fke's own row of `fke version`.
type fkeVersion struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

// componentVersion is an upstream binary's row of `fke version`.
type componentVersion struct {
	Name string `json:"name"`
	// Path is where fke found it; empty when it is not built.
	Path string `json:"path,omitempty"`
	binaries.Stamp
	Error string `json:"error,omitempty"`
}

type versionReport struct {
	FKE        fkeVersion         `json:"fke"`
	Components []componentVersion `json:"components"`
}

// releaseVersion is the version of a release build (`make release` sets it:
// -X fke.dev/fke/internal/cli.releaseVersion=vX.Y.Z); empty otherwise.
var releaseVersion string

// ownVersion reads fke's version from the build information Go stamps into
// the binary (the module version, and the commit of the checkout it was
// built from).
func ownVersion() fkeVersion {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fkeVersion{Version: "unknown"}
	}
	v := fkeVersion{Version: cmp.Or(releaseVersion, bi.Main.Version), Go: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// newVersionCmd prints fke's version and the versions of the upstream
// binaries it would run, each read from the binary's own build information.
func newVersionCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print fke's version and commit, and the version of every upstream binary it runs (read from each binary)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep := versionReport{FKE: ownVersion()}
			f := g.finder()
			for _, name := range binaries.Components() {
				row := componentVersion{Name: name}
				p, err := f.Path(name)
				var missing *binaries.MissingError
				switch {
				case errors.As(err, &missing):
					row.Error = "not built"
				case err != nil:
					row.Error = err.Error()
				default:
					row.Path = p
					if row.Stamp, err = binaries.ReadStamp(p); err != nil {
						row.Error = err.Error()
					}
				}
				rep.Components = append(rep.Components, row)
			}
			if output != "" {
				return printObject(g.out, output, rep)
			}
			commit := rep.FKE.Commit
			if len(commit) > 12 {
				commit = commit[:12]
			}
			if rep.FKE.Modified {
				commit += " (modified)"
			}
			fmt.Fprintf(g.out, "fke %s, commit %s, %s\n\n", rep.FKE.Version, orDash(commit), rep.FKE.Go)
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "COMPONENT\tVERSION\tMODULE\tPATH")
			for _, r := range rep.Components {
				if r.Error != "" {
					fmt.Fprintf(tw, "%s\t-\t-\t%s\n", r.Name, r.Error)
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.Version, r.Module, r.Path)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
	return cmd
}
