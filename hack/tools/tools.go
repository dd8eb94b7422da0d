//go:build tools

// Package tools pins the code generators fke uses (controller-gen).
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
