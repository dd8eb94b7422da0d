// Command clidocs writes the CLI reference (docs/reference/cli.md) to
// standard output: `make docs` runs it.
package main

import (
	"fmt"
	"os"

	"fke.dev/fke/internal/cli"
)

func main() {
	// Defaults read from the environment are written as a user's would be.
	for k, v := range cli.ReferenceEnv {
		os.Setenv(k, v)
	}
	if err := cli.WriteReference(os.Stdout, cli.NewRoot()); err != nil {
		fmt.Fprintln(os.Stderr, "clidocs:", err)
		os.Exit(1)
	}
}
