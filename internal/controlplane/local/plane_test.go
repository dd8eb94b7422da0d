package local

import (
	"slices"
	"testing"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/versions"
)

func TestChooseLayout(t *testing.T) {
	def, prev := versions.Default, versions.Previous
	for _, tc := range []struct {
		name     string
		recorded string
		offered  bool
		hasData  bool
		versions []string
		want     string
	}{
		{name: "new plane, one process offered", offered: true, versions: []string{def, def, def}, want: LayoutCombined},
		{name: "new plane, versions left to the default", offered: true, versions: []string{"", "", ""}, want: LayoutCombined},
		{name: "not offered", versions: []string{def, def, def}, want: LayoutSeparate},
		{name: "another version", offered: true, versions: []string{prev, prev, prev}, want: LayoutSeparate},
		{name: "mid-upgrade", offered: true, versions: []string{def, prev, prev}, want: LayoutSeparate},
		{name: "data from before layouts were recorded", offered: true, hasData: true, versions: []string{def, def, def}, want: LayoutSeparate},
		{name: "recorded combined stays, even when no longer offered", recorded: LayoutCombined, versions: []string{def, def, def}, want: LayoutCombined},
		{name: "recorded separate stays when offered", recorded: LayoutSeparate, offered: true, hasData: true, versions: []string{def, def, def}, want: LayoutSeparate},
		{name: "unreadable record decides afresh", recorded: "garbage", offered: true, versions: []string{def, def, def}, want: LayoutCombined},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := chooseLayout(tc.recorded, tc.offered, tc.hasData, tc.versions); got != tc.want {
				t.Fatalf("chooseLayout = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPlaneArgs: the seed first, then every component's flags, exactly its
// separate process's, after its name, components apart by "--".
func TestPlaneArgs(t *testing.T) {
	l := newLayout("/data/team/a")
	spec := controlplane.Spec{Key: "team/a", Version: versions.Default, ServiceCIDR: "10.96.0.0/16", PodCIDR: "10.112.0.0/14",
		Ports: controlplane.Ports{APIServer: 1, EtcdClient: 2, EtcdPeer: 3, ControllerManager: 4, Scheduler: 5}}
	args := planeArgs(l, spec, "/data/.seeds/plane.json")
	if args[0] != "--seed=/data/.seeds/plane.json" {
		t.Fatalf("args[0] = %q, want the seed", args[0])
	}
	i := 1
	for n, c := range controlplane.Components {
		if n > 0 {
			if args[i] != "--" {
				t.Fatalf("args[%d] = %q, want -- before %s", i, args[i], c)
			}
			i++
		}
		if args[i] != c {
			t.Fatalf("args[%d] = %q, want the component name %s", i, args[i], c)
		}
		i++
		own := componentArgs(c, l, spec)
		if !slices.Equal(args[i:i+len(own)], own) {
			t.Fatalf("%s's flags in the plane differ from its own process's:\n%q\n%q", c, args[i:i+len(own)], own)
		}
		i += len(own)
	}
	if i != len(args) {
		t.Fatalf("%d arguments left over: %q", len(args)-i, args[i:])
	}
}
