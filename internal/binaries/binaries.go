// Package binaries finds the upstream executables fke runs (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kwok).
package binaries

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"fke.dev/fke/internal/versions"
)

// EnvDir names the environment variable that points at a directory of binaries.
const EnvDir = "FKE_BIN_DIR"

// Names of the upstream binaries built by `make binaries`.
const (
	Etcd = "etcd"
	// Etcdutl restores etcd snapshots (a cluster created from a backup).
	Etcdutl               = "etcdutl"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kubelet               = "kubelet"
	Kwok                  = "kwok"
	// Registry is the OCI registry (distribution/distribution) `fke up` runs.
	Registry = "registry"
	// CoreDNS is packed into the cluster-DNS image of clusters with local nodes.
	CoreDNS = "coredns"
	// KubePlane runs a tenant's etcd, kube-apiserver, kube-controller-manager
	// and kube-scheduler of the default version in one process (built by
	// `make binaries` from cmd/fke-kube-plane, upstream's packages).
	KubePlane = "fke-kube-plane"
)

// Names of fke's own binaries that go into images (built by `make build`).
const (
	Pause      = "fke-pause"
	DemoServer = "fke-demo-server"
	GPUAgent   = "fke-gpu-agent"
	Manager    = "fke-manager"
)

// MissingError says which binary was not found and where fke looked.
type MissingError struct {
	Name    string
	Visited []string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s not found (looked in %s and $PATH): build the upstream binaries with `make binaries` "+
		"(about 12 minutes on an empty cache) or set %s to the directory that holds them",
		e.Name, strings.Join(e.Visited, ", "), EnvDir)
}

// Finder locates binaries. Dir, when set, is searched first (a --bin-dir flag).
type Finder struct {
	Dir string
}

// searchDirs lists the directories searched before $PATH, in order: Dir,
// $FKE_BIN_DIR, the directory of the running executable, ./_output/bin.
func (f Finder) searchDirs() []string {
	var dirs []string
	add := func(d string) {
		if d == "" {
			return
		}
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		for _, seen := range dirs {
			if seen == d {
				return
			}
		}
		dirs = append(dirs, d)
	}
	add(f.Dir)
	add(os.Getenv(EnvDir))
	if exe, err := os.Executable(); err == nil {
		add(filepath.Dir(exe))
	}
	add(filepath.Join("_output", "bin"))
	return dirs
}

// Path returns the absolute path of the binary name, or a *MissingError.
func (f Finder) Path(name string) (string, error) {
	dirs := f.searchDirs()
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if !strings.Contains(name, "/") {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", &MissingError{Name: name, Visited: dirs}
}

// Versioned lists the binaries built per Kubernetes version: those of the
// default version sit in the binaries directory itself, those of another
// version in a subdirectory named after it (e.g. v1.36.3/kubelet).
var Versioned = []string{KubeAPIServer, KubeControllerManager, KubeScheduler, Kubelet, KubeProxy}

// KubeProxy is the kube-proxy binary every local node runs.
const KubeProxy = "kube-proxy"

// PathFor returns the binary name of Kubernetes version (empty: the
// default). The default version's binaries are found as Path finds them; so
// is a binary that is not built per version (see Versioned).
func (f Finder) PathFor(version, name string) (string, error) {
	if version == "" || version == versions.Default || !slices.Contains(Versioned, name) {
		return f.Path(name)
	}
	return f.Path(filepath.Join(version, name))
}

// Paths resolves several binaries at once, reporting every missing one.
func (f Finder) Paths(names ...string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	var errs []error
	for _, n := range names {
		p, err := f.Path(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[n] = p
	}
	return out, errors.Join(errs...)
}
