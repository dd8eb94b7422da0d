//go:build tools

// Package tools pins metrics-server, built into _output/bin by `make binaries`.
package tools

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
