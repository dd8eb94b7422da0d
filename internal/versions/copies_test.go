package versions

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestCopiesAgree: Default and Previous are the one source of the
// Kubernetes versions; the places that must repeat them (the build of the
// upstream binaries, the Go modules that pin them, the Cluster CRD's
// default) say the same, or this test names the copy that does not.
func TestCopiesAgree(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	for _, c := range []struct {
		file, pattern, want string
	}{
		{"hack/k8s/build.sh", `(?m)^k8s_version=(\S+)$`, Default},
		{"hack/k8s/build.sh", `(?m)^old_version=(\S+)$`, Previous},
		{"hack/k8s/go.mod", `(?m)^require k8s.io/kubernetes (\S+)$`, Default},
		{"cmd/fke-kube-plane/go.mod", `(?m)^require k8s.io/kubernetes (\S+)$`, Default},
		{"hack/k8s/v1.36/go.mod", `(?m)^require k8s.io/kubernetes (\S+)$`, Previous},
		{"api/v1alpha1/cluster_types.go", `\+kubebuilder:default="(v[0-9.]+)"`, Default},
		{"config/crd/bases/fke.dev_clusters.yaml", `default: (v1\.[0-9.]+)`, Default},
		{"charts/fke/crds/fke.dev_clusters.yaml", `default: (v1\.[0-9.]+)`, Default},
	} {
		data, err := os.ReadFile(filepath.Join(root, c.file))
		if err != nil {
			t.Error(err)
			continue
		}
		m := regexp.MustCompile(c.pattern).FindSubmatch(data)
		switch {
		case m == nil:
			t.Errorf("%s: no match for %s (the copy moved: update this test)", c.file, c.pattern)
		case string(m[1]) != c.want:
			t.Errorf("%s says %s, internal/versions says %s", c.file, m[1], c.want)
		}
	}
}
