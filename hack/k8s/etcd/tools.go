//go:build tools

// Package tools pins etcd and etcdutl (snapshot restore), built into _output/bin by `make binaries`.
package tools

import (
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
