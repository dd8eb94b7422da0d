//go:build tools

// Package tools pins Kueue, built into _output/bin by `make binaries` for the
// end-to-end test of Kueue's ProvisioningRequest admission check.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
