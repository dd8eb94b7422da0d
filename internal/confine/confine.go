// Package confine recognises os.Root's refusal of a path that leaves its
// root: fke opens every path named by users' content (a repository, a
// chart, a kustomization, a values file) through os.Root and reports such a
// path as leaving its tree.
package confine

import "strings"

// Escapes reports whether err is os.Root's refusal of a path that leaves the
// root, by "..", an absolute name or a symbolic link. The standard library
// exports no value for it; its message is stable, and TestEscapes fails if
// it changes.
func Escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}
