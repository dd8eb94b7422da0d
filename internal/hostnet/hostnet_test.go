package hostnet

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRoutes(t *testing.T) {
	out := "default via 192.0.2.1 dev eth0 \n192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2 \n" +
		"10.112.1.0/24 via 172.29.0.2 dev fke0 \n10.0.0.7 dev tun0 scope link \n"
	got := parseRoutes(out)
	want := []Route{
		{Gateway: netip.MustParseAddr("192.0.2.1"), Dev: "eth0"},
		{Dst: netip.MustParsePrefix("192.0.2.0/24"), Dev: "eth0"},
		{Dst: netip.MustParsePrefix("10.112.1.0/24"), Gateway: netip.MustParseAddr("172.29.0.2"), Dev: "fke0"},
		{Dst: netip.MustParsePrefix("10.0.0.7/32"), Dev: "tun0"},
	}
	if len(got) != len(want) {
		t.Fatalf("parseRoutes = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("route %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestCheckRanges(t *testing.T) {
	pods := netip.MustParsePrefix("10.112.0.0/16")
	for _, tc := range []struct {
		name    string
		routes  []Route
		extra   []netip.Prefix
		wantErr string
	}{
		{name: "default route only", routes: []Route{{Gateway: netip.MustParseAddr("192.0.2.1"), Dev: "eth0"}}},
		{name: "own bridge is fine", routes: []Route{{Dst: NodeRange, Dev: Bridge}}},
		{name: "host range overlaps nodes", routes: []Route{{Dst: netip.MustParsePrefix("172.16.0.0/12"), Dev: "eth0"}}, wantErr: "172.16.0.0/12 dev eth0 overlaps 172.29.0.0/16"},
		{name: "host range overlaps pods", routes: []Route{{Dst: netip.MustParsePrefix("10.112.4.0/24"), Dev: "tun0"}}, extra: []netip.Prefix{pods}, wantErr: "overlaps 10.112.0.0/16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRanges(tc.routes, tc.extra...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("CheckRanges: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("CheckRanges = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func TestAllocateIP(t *testing.T) {
	a, err := AllocateIP(nil)
	if err != nil || a != netip.MustParseAddr("172.29.0.2") {
		t.Fatalf("AllocateIP(nil) = %v, %v; want 172.29.0.2", a, err)
	}
	a, err = AllocateIP([]netip.Addr{netip.MustParseAddr("172.29.0.2"), netip.MustParseAddr("172.29.0.4")})
	if err != nil || a != netip.MustParseAddr("172.29.0.3") {
		t.Fatalf("AllocateIP = %v, %v; want 172.29.0.3", a, err)
	}
	var all []netip.Addr
	for x := Gateway.Next(); NodeRange.Contains(x); x = x.Next() {
		all = append(all, x)
	}
	if _, err := AllocateIP(all); err == nil {
		t.Fatal("AllocateIP of a full range succeeded")
	}
}

func TestNames(t *testing.T) {
	ns := NetnsName("default/demo", "demo-cpu-x7k2p")
	if ns != "fke-default.demo.demo-cpu-x7k2p" {
		t.Errorf("NetnsName = %q", ns)
	}
	if v := VethName(ns); len(v) > 15 || !strings.HasPrefix(v, VethPrefix) || v == VethName(ns+"x") {
		t.Errorf("VethName = %q: want fkev + a hash, at most 15 bytes, differing per namespace", v)
	}
}

func TestParseAddrs(t *testing.T) {
	got := parseAddrs("2: eth0    inet 172.29.0.7/16 scope global eth0\\       valid_lft forever preferred_lft forever\n")
	if len(got) != 1 || got[0] != netip.MustParseAddr("172.29.0.7") {
		t.Fatalf("parseAddrs = %v", got)
	}
}
