// Package policy embeds the ValidatingAdmissionPolicies of the fke.dev API:
// the rules a CRD's CEL cannot express (those that depend on the operation).
package policy

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed *.yaml
var manifests embed.FS

// All returns the policies and their bindings, in the order to apply them.
func All() ([]*unstructured.Unstructured, error) {
	files, err := fs.Glob(manifests, "*.yaml")
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := manifests.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("decoding %s: %w", f, err)
			}
			if len(u.Object) > 0 {
				out = append(out, u)
			}
		}
	}
	return out, nil
}
