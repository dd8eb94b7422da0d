//go:build tools

// Package tools pins CoreDNS, built into _output/bin by `make binaries` and
// packed into the cluster-DNS image of clusters with local nodes.
package tools

import _ "github.com/coredns/coredns"
