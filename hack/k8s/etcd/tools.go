//go:build tools

// Package tools pins etcd, built into _output/bin by `make binaries`.
package tools

import _ "go.etcd.io/etcd/server/v3"
