package warmpool

import (
	"slices"
	"testing"
	"time"
)

var (
	t0    = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	shape = Shape{Version: "v1.37.2", ServiceCIDR: "10.96.0.0/16", NodeAddress: "172.29.0.1"}
	old   = Shape{Version: "v1.36.3", ServiceCIDR: "10.96.0.0/16", NodeAddress: "172.29.0.1"}
)

func plane(id string, ready bool, created int, claimedBy string) Plane {
	return Plane{ID: id, Shape: shape, PodCIDR: "10." + id + ".0.0/16", Ready: ready, ClaimedBy: claimedBy, Created: t0.Add(time.Duration(created) * time.Second)}
}

func TestPick(t *testing.T) {
	for _, tc := range []struct {
		name   string
		planes []Plane
		req    Request
		want   string // "" = none
	}{
		{"empty pool", nil, Request{Shape: shape}, ""},
		{"oldest ready", []Plane{plane("2", true, 2, ""), plane("1", true, 1, ""), plane("0", false, 0, "")}, Request{Shape: shape}, "1"},
		{"never a claimed plane", []Plane{plane("1", true, 1, "uid-a")}, Request{Shape: shape}, ""},
		{"never a plane that is not ready", []Plane{plane("1", false, 1, "")}, Request{Shape: shape}, ""},
		{"other version", []Plane{plane("1", true, 1, "")}, Request{Shape: old}, ""},
		{"other service range", []Plane{plane("1", true, 1, "")}, Request{Shape: Shape{Version: "v1.37.2", ServiceCIDR: "10.100.0.0/16", NodeAddress: "172.29.0.1"}}, ""},
		{"pod range asked for and matching", []Plane{plane("1", true, 1, ""), plane("2", true, 2, "")}, Request{Shape: shape, PodCIDR: "10.2.0.0/16"}, "2"},
		{"pod range asked for, none matches", []Plane{plane("1", true, 1, "")}, Request{Shape: shape, PodCIDR: "10.9.0.0/16"}, ""},
		{"cluster already provisioned", []Plane{plane("1", true, 1, "")}, Request{Shape: shape, Provisioned: true}, ""},
		{"restore from a snapshot", []Plane{plane("1", true, 1, "")}, Request{Shape: shape, Restore: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := Pick(tc.planes, tc.req)
			if ok != (tc.want != "") || p.ID != tc.want {
				t.Fatalf("Pick = %q, %v; want %q", p.ID, ok, tc.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	stale := plane("s", true, 0, "")
	stale.Shape = old
	exists := map[string]bool{"uid-a": true}
	for _, tc := range []struct {
		name   string
		planes []Plane
		size   int
		busy   bool
		start  bool
		remove []string
	}{
		{"empty pool fills", nil, 2, false, true, nil},
		{"not while a cluster starts", nil, 2, true, false, nil},
		{"one at a time", []Plane{plane("1", false, 1, "")}, 2, false, false, nil},
		{"next once the last is ready", []Plane{plane("1", true, 1, "")}, 2, false, true, nil},
		{"full", []Plane{plane("1", true, 1, ""), plane("2", true, 2, "")}, 2, false, false, nil},
		{"claimed planes do not count", []Plane{plane("1", true, 1, "uid-a"), plane("2", true, 2, "")}, 2, false, true, nil},
		{"shrunk: newest go", []Plane{plane("1", true, 1, ""), plane("3", false, 3, ""), plane("2", true, 2, "")}, 1, false, false, []string{"2", "3"}},
		{"off: all go", []Plane{plane("1", true, 1, ""), plane("2", true, 2, "")}, 0, false, false, []string{"1", "2"}},
		{"stale shape goes, a new one starts", []Plane{stale}, 1, false, true, []string{"s"}},
		{"claim of a deleted cluster goes", []Plane{plane("1", true, 1, "uid-gone"), plane("2", true, 2, "uid-a")}, 0, false, false, []string{"1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.planes, shape, tc.size, tc.busy, exists)
			slices.Sort(got.Remove)
			if got.Start != tc.start || !slices.Equal(got.Remove, tc.remove) {
				t.Fatalf("Decide = %+v; want start %v, remove %v", got, tc.start, tc.remove)
			}
		})
	}
}
