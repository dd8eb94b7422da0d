package binaries

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestStampOf(t *testing.T) {
	k8s := &debug.Module{Path: "k8s.io/kubernetes", Version: "v1.37.2"}
	tests := []struct {
		name string
		bi   debug.BuildInfo
		want Stamp
	}{
		{"upstream component from a pinning module", debug.BuildInfo{GoVersion: "go1.26.8", Path: "k8s.io/kubernetes/cmd/kube-apiserver",
			Main: debug.Module{Path: "fke.dev/hack/k8s", Version: "(devel)"}, Deps: []*debug.Module{{Path: "k8s.io/api", Version: "v0.37.2"}, k8s}},
			Stamp{Package: "k8s.io/kubernetes/cmd/kube-apiserver", Module: "k8s.io/kubernetes", Version: "v1.37.2", Go: "go1.26.8"}},
		{"the longest module wins", debug.BuildInfo{Path: "go.etcd.io/etcd/server/v3",
			Deps: []*debug.Module{{Path: "go.etcd.io/etcd", Version: "v3.0.0"}, {Path: "go.etcd.io/etcd/server/v3", Version: "v3.6.5"}}},
			Stamp{Package: "go.etcd.io/etcd/server/v3", Module: "go.etcd.io/etcd/server/v3", Version: "v3.6.5"}},
		{"a replaced module reports its replacement", debug.BuildInfo{Path: "sigs.k8s.io/kwok/cmd/kwok",
			Deps: []*debug.Module{{Path: "sigs.k8s.io/kwok", Version: "v0.7.0", Replace: &debug.Module{Path: "sigs.k8s.io/kwok", Version: "v0.8.0"}}}},
			Stamp{Package: "sigs.k8s.io/kwok/cmd/kwok", Module: "sigs.k8s.io/kwok", Version: "v0.8.0"}},
		{"fke's own plane reports the Kubernetes it links", debug.BuildInfo{Path: "fke.dev/fke/cmd/fke-kube-plane",
			Main: debug.Module{Path: "fke.dev/fke/cmd/fke-kube-plane", Version: "(devel)"}, Deps: []*debug.Module{k8s}},
			Stamp{Package: "fke.dev/fke/cmd/fke-kube-plane", Module: "k8s.io/kubernetes", Version: "v1.37.2"}},
	}
	for _, tt := range tests {
		if got := StampOf(&tt.bi); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// TestReadStamp reads the stamp of this test's own binary.
func TestReadStamp(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadStamp(exe)
	if err != nil {
		t.Fatal(err)
	}
	if s.Module != "fke.dev/fke" || s.Go == "" {
		t.Errorf("stamp %+v, want module fke.dev/fke and a toolchain", s)
	}
	if _, err := ReadStamp("stamp_test.go"); err == nil {
		t.Error("a source file has a stamp")
	}
}
