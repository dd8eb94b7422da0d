//go:build tools

// Package tools pins the OCI registry (distribution/distribution), built into
// _output/bin by `make binaries`; `fke up` runs it for local nodes' images.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
