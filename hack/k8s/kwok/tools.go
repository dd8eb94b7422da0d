//go:build tools

// Package tools pins kwok, built into _output/bin by `make binaries`.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
