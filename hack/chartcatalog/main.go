// Command chartcatalog writes the Helm chart's template of the default
// instance types (internal/catalog) to standard output; `make chart-crds`
// runs it, and the chart's tests compare the template with the catalog.
package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"fke.dev/fke/internal/catalog"
)

func main() {
	fmt.Println("{{- /* Generated from internal/catalog by `make chart-crds`: do not edit. */}}")
	fmt.Println("{{- if .Values.instanceTypes.install }}")
	for _, it := range catalog.Default() {
		if it.Annotations == nil {
			it.Annotations = map[string]string{}
		}
		// Pools name their instance type: uninstalling the chart leaves them.
		it.Annotations["helm.sh/resource-policy"] = "keep"
		out, err := yaml.Marshal(&it)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("---\n%s", out)
	}
	fmt.Println("{{- end }}")
}
