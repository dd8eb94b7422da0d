package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// ReferenceEnv is the environment the reference is written in: defaults
// that come from it read as any user's would ("~/.fke"), not this machine's.
var ReferenceEnv = map[string]string{"HOME": "~", "FKE_BIN_DIR": "", "FKE_HOME": "", "KUBECONFIG": ""}

// WriteReference writes the CLI reference in Markdown: every command
// under root, depth first, with its usage, description, examples and
// flags, as `fke <command> --help` prints them. docs/reference/cli.md is
// its output (`make docs`); a test keeps the two equal.
func WriteReference(w io.Writer, root *cobra.Command) error {
	var b strings.Builder
	b.WriteString("# CLI reference\n\nGenerated from the commands' own help by `make docs`; do not edit.\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		fmt.Fprintf(&b, "\n## %s\n\n", c.CommandPath())
		desc := c.Long
		if desc == "" {
			desc = c.Short
		}
		if desc != "" {
			b.WriteString(strings.TrimSpace(desc) + "\n\n")
		}
		fmt.Fprintf(&b, "```\n%s\n```\n", c.UseLine())
		if len(c.Aliases) > 0 {
			fmt.Fprintf(&b, "\nAliases: %s\n", strings.Join(c.Aliases, ", "))
		}
		if c.Example != "" {
			fmt.Fprintf(&b, "\nExamples:\n\n```\n%s\n```\n", strings.TrimRight(c.Example, "\n"))
		}
		if f := c.NonInheritedFlags().FlagUsages(); f != "" {
			heading := "Flags"
			if !c.HasParent() {
				heading = "Global flags (every command takes them)"
			}
			fmt.Fprintf(&b, "\n%s:\n\n```\n%s```\n", heading, f)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	_, err := io.WriteString(w, b.String())
	return err
}
