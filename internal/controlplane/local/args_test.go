package local

import (
	"slices"
	"testing"

	"fke.dev/fke/internal/controlplane"
)

func TestAPIServerAdvertises(t *testing.T) {
	l := newLayout(t.TempDir())
	loopback := apiServerArgs(l, controlplane.Spec{ServiceCIDR: "10.96.0.0/16"})
	for _, want := range []string{"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"} {
		if !slices.Contains(loopback, want) {
			t.Errorf("without a node address, args lack %s: %v", want, loopback)
		}
	}
	nodes := apiServerArgs(l, controlplane.Spec{ServiceCIDR: "10.96.0.0/16", NodeAddress: "172.29.0.1"})
	if !slices.Contains(nodes, "--advertise-address=172.29.0.1") || !slices.Contains(nodes, "--bind-address=127.0.0.1") {
		t.Errorf("with a node address, args = %v", nodes)
	}
	for _, a := range nodes {
		if a == "--endpoint-reconciler-type=none" || a == "--advertise-address=127.0.0.1" {
			t.Errorf("with a node address, args keep %s", a)
		}
	}
}
