package netrange

import (
	"net/netip"
	"strings"
	"testing"
)

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func TestPickPodCIDR(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		avoid []netip.Prefix
		want  string
	}{
		{"empty machine", nil, "10.112.0.0/14"},
		{"the old default range of an existing cluster", prefixes("10.112.0.0/12"), "10.128.0.0/14"},
		{"another picked cluster", prefixes("10.112.0.0/14"), "10.116.0.0/14"},
		{"a host route inside the next block", prefixes("10.112.0.0/14", "10.117.3.0/24"), "10.120.0.0/14"},
		{"a host route covering the whole top", prefixes("10.112.0.0/12", "10.128.0.0/9"), "10.0.0.0/14"},
		{"everything taken", prefixes("10.0.0.0/9", "10.128.0.0/9"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PickPodCIDR(tt.avoid)
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), "--pod-cidr") {
					t.Fatalf("got %s, %v; want an error naming --pod-cidr", got, err)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("got %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	// The default service range is never picked: with everything else taken
	// below 10.96, the block holding 10.96.0.0/16 is skipped.
	avoid := prefixes("10.112.0.0/12", "10.128.0.0/9", "10.0.0.0/10", "10.64.0.0/11")
	if got, err := PickPodCIDR(avoid); err != nil || got.String() != "10.100.0.0/14" {
		t.Fatalf("got %s, %v; want 10.100.0.0/14 (10.96.0.0/14 holds the service range)", got, err)
	}
}

func TestParseRoutes(t *testing.T) {
	t.Parallel()
	table := `Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth0	00000000	0100A8C0	0003	0	0	0	00000000	0	0	0
eth0	0000A8C0	00000000	0001	0	0	0	00FFFFFF	0	0	0
fke0	00001DAC	00000000	0001	0	0	0	0000FFFF	0	0	0
`
	got, err := ParseRoutes(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].String() != "192.168.0.0/24" || got[1].String() != "172.29.0.0/16" {
		t.Fatalf("routes = %v", got)
	}
	if _, err := ParseRoutes(strings.NewReader("h\neth0 zz 0 0 0 0 0 00FFFFFF\n")); err == nil {
		t.Fatal("bad hex parsed")
	}
	if _, err := HostRoutes(); err != nil {
		t.Fatalf("reading this host's routes: %v", err)
	}
}

func TestCheckLocalPodRange(t *testing.T) {
	t.Parallel()
	local := func(key, cidr string) LocalCluster {
		return LocalCluster{Key: key, PodCIDR: netip.MustParsePrefix(cidr)}
	}
	b := local("team/b", "10.112.0.0/12")
	tests := []struct {
		name    string
		cluster LocalCluster
		others  []LocalCluster
		want    []string // substrings of the error; none: accepted
	}{
		{"first cluster with local nodes", local("default/a", "10.112.0.0/14"), nil, nil},
		{"disjoint", local("default/a", "10.128.0.0/14"), []LocalCluster{b}, nil},
		{"inside another's range", local("default/a", "10.112.0.0/16"), []LocalCluster{b},
			[]string{"cluster default/a's pod range 10.112.0.0/16 overlaps pod range 10.112.0.0/12 of cluster team/b, which uses local nodes",
				"create the cluster with a pod range of its own (spec.network.podCIDR, `fke cluster create --pod-cidr`)"}},
		{"holding another's range", local("default/a", "10.0.0.0/8"), []LocalCluster{b}, []string{"10.0.0.0/8 overlaps pod range 10.112.0.0/12 of cluster team/b"}},
		{"itself", local("team/b", "10.112.0.0/12"), []LocalCluster{b, b}, nil},
		{"the same cluster twice is named once", local("default/a", "10.112.0.0/16"), []LocalCluster{b, b, local("team/c", "10.0.0.0/9")},
			[]string{"overlaps pod range 10.112.0.0/12 of cluster team/b, which uses local nodes and pod range 10.0.0.0/9 of cluster team/c, which uses local nodes:"}},
		{"the local node addresses", local("default/a", "172.16.0.0/12"), nil,
			[]string{"cluster default/a's pod range 172.16.0.0/12 overlaps 172.29.0.0/16, the addresses of local nodes on this host"}},
		{"unmasked ranges", local("default/a", "10.112.5.0/16"), []LocalCluster{local("team/b", "10.112.9.9/20")}, []string{"10.112.0.0/16 overlaps pod range 10.112.0.0/20"}},
		{"no range yet", LocalCluster{Key: "default/a"}, []LocalCluster{b}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckLocalPodRange(tt.cluster, tt.others)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "team/b"); n > 1 {
				t.Errorf("cluster team/b named %d times: %v", n, err)
			}
		})
	}
}
