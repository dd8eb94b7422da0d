package binaries

import (
	"debug/buildinfo"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"strings"

	"fke.dev/fke/internal/versions"
)

// Stamp is what a Go binary says of itself: the build information the Go
// linker embeds in every binary (`go version -m` prints it).
type Stamp struct {
	// Package is the main package it was built from.
	Package string `json:"package"`
	// Module holds Package; Version is that module's version. A binary
	// built from a pinning module of its own (fke-kube-plane) reports the
	// Kubernetes module it links.
	Module  string `json:"module"`
	Version string `json:"version"`
	// Go is the toolchain that built it.
	Go string `json:"go"`
}

// StampOf reads the stamp from build information (pure).
func StampOf(bi *debug.BuildInfo) Stamp {
	s := Stamp{Package: bi.Path, Go: bi.GoVersion}
	var k8s *debug.Module
	for _, m := range append([]*debug.Module{&bi.Main}, bi.Deps...) {
		if m.Replace != nil {
			m = m.Replace
		}
		if m.Path == "k8s.io/kubernetes" {
			k8s = m
		}
		if (bi.Path == m.Path || strings.HasPrefix(bi.Path, m.Path+"/")) && len(m.Path) > len(s.Module) {
			s.Module, s.Version = m.Path, m.Version
		}
	}
	if (s.Version == "" || s.Version == "(devel)") && k8s != nil {
		s.Module, s.Version = k8s.Path, k8s.Version
	}
	return s
}

// ReadStamp reads the stamp of the binary at path.
func ReadStamp(path string) (Stamp, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return Stamp{}, fmt.Errorf("reading the build information of %s: %w", path, err)
	}
	return StampOf(bi), nil
}

// TestOnly are the upstream binaries only fke's tests run (Kueue, for its
// end-to-end test): Components lists them, releases leave them out.
var TestOnly = []string{"kueue"}

// Own lists fke's own binaries (`make build`).
func Own() []string {
	return []string{"fke", Manager, GPUAgent, "fke-gpu-metrics", "fke-vpa", Pause, DemoServer}
}

// Components lists the upstream binaries fke runs, by the name Finder
// resolves: the default version's, the older minor's (in its version
// directory), and Kueue (its end-to-end test only).
func Components() []string {
	out := []string{Etcd, Etcdutl, KubeAPIServer, KubeControllerManager, KubeScheduler, Kubelet, KubeProxy, "kubectl",
		KubePlane, Kwok, Registry, CoreDNS, "metrics-server"}
	for _, v := range versions.Supported() {
		if v == versions.Default {
			continue
		}
		for _, n := range Versioned {
			out = append(out, filepath.Join(v, n))
		}
	}
	return append(out, TestOnly...)
}
