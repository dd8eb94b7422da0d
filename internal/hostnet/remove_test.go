package hostnet

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

// racingHost is a host whose fke pieces another fke removes at the moment
// this one tries to (two `fke down` at once): each removal finds the
// piece gone and fails as iptables and ip do. With stuck, removals fail
// and the pieces stay.
type racingHost struct {
	rules  map[string]bool // "table chain spec..."
	chains map[string]bool // "table chain"
	bridge bool
	stuck  bool
}

func (h *racingHost) run(_ context.Context, name string, args ...string) ([]byte, error) {
	fail := errors.New("exit status 1")
	switch {
	case name == "ip" && slices.Equal(args, []string{"link", "show", "dev", Bridge}):
		if !h.bridge {
			return nil, fail
		}
		return nil, nil
	case name == "ip" && slices.Equal(args, []string{"link", "del", Bridge}):
		h.bridge = h.stuck
		return nil, fail
	case name != "iptables" || len(args) < 6:
		return nil, errors.New("unexpected command " + name + " " + strings.Join(args, " "))
	}
	rest := args[3:] // after -w 5 -t
	if rest[1] == "-n" {
		rest = slices.Delete(slices.Clone(rest), 1, 2)
	}
	table, op, chain := rest[0], rest[1], rest[2]
	key := table + " " + chain + " " + strings.Join(rest[3:], " ")
	switch op {
	case "-C":
		if !h.rules[key] {
			return nil, fail
		}
	case "-D":
		h.rules[key] = h.stuck
		return nil, fail
	case "-L":
		if !h.chains[table+" "+chain] {
			return nil, fail
		}
	case "-F", "-X":
		h.chains[table+" "+chain] = h.stuck
		return nil, fail
	}
	return nil, nil
}

func newRacingHost(stuck bool) *racingHost {
	h := &racingHost{rules: map[string]bool{}, chains: map[string]bool{}, bridge: true, stuck: stuck}
	for _, r := range jumps() {
		h.rules[r.table+" "+r.chain+" "+strings.Join(r.spec, " ")] = true
	}
	for _, c := range []string{"nat " + ChainPrerouting, "nat " + ChainOutput, "filter " + ChainInput, "filter " + ChainForward} {
		h.chains[c] = true
	}
	return h
}

func TestRemoveBridgeBesideAnotherFke(t *testing.T) {
	h := newRacingHost(false)
	if err := New(h.run, nil).RemoveBridge(context.Background()); err != nil {
		t.Errorf("RemoveBridge while another fke removes the same pieces: %v, want no error", err)
	}
	if h.bridge || slices.Contains(slices.Collect(maps.Values(h.rules)), true) || slices.Contains(slices.Collect(maps.Values(h.chains)), true) {
		t.Errorf("left behind: bridge %v, rules %v, chains %v", h.bridge, h.rules, h.chains)
	}

	stuck := newRacingHost(true)
	err := New(stuck.run, nil).RemoveBridge(context.Background())
	for _, want := range []string{"deleting iptables rule", "flushing", "deleting bridge"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("RemoveBridge when removals fail and the pieces stay: %v, want it to say %q", err, want)
		}
	}
}
