package local

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"fke.dev/fke/internal/hostnet"
)

// A cluster's API port stays exposed to nodes while one of its nodes is
// left, and is unexposed with its last node (a pool scaled to zero), so
// that deleting the cluster later leaves no rule of it.
func TestTidyUnexposesPortsNoNodeUses(t *testing.T) {
	var deleted []string
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		if name != "iptables" {
			return nil, nil
		}
		cmd := strings.Join(args, " ")
		switch {
		case slices.Contains(args, "-D"):
			deleted = append(deleted, cmd)
		case slices.Contains(args, "-C"):
			if slices.Contains(deleted, strings.Replace(cmd, " -C ", " -D ", 1)) {
				return nil, errors.New("no such rule")
			}
		}
		return nil, nil
	}
	p, err := New(Options{DataDir: t.TempDir(), Host: hostnet.New(run, nil), HostCPU: resource.MustParse("2"), HostMemory: resource.MustParse("4Gi")})
	if err != nil {
		t.Fatal(err)
	}
	left := record{ClusterKey: "default/a", MachineName: "m1", APIPort: 6443}
	path := Layout{Dir: p.nodeDir(left.ClusterKey, "n1")}.Record()
	data, err := json.Marshal(left)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.tidyLocked(t.Context(), 6443, 7443); err != nil {
		t.Fatal(err)
	}
	var ports []string
	for _, d := range deleted {
		f := strings.Fields(d)
		if i := slices.Index(f, "--dport"); i >= 0 {
			ports = append(ports, f[i+1])
		}
	}
	if !slices.Equal(ports, []string{"7443", "7443"}) {
		t.Errorf("rules deleted for ports %v, want the two rules of 7443 (no node left) and none of 6443 (node n1 uses it):\n%s", ports, strings.Join(deleted, "\n"))
	}
}
