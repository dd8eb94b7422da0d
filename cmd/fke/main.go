// Command fke is the fke command line: the local management plane, clusters,
// node pools, kubeconfigs and deployments.
package main

import (
	"os"

	"fke.dev/fke/internal/cli"
)

func main() { os.Exit(cli.Execute()) }
