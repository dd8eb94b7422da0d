//go:build tools

// Package tools pins the older Kubernetes minor that fke can also run, so a
// cluster can be created on it and upgraded to the newest. Its components are
// built into _output/bin/v1.36.3 by `make binaries`.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
