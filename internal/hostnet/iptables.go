package hostnet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// rule is one iptables rule: its table, chain and match/target arguments.
type rule struct {
	table string
	chain string
	spec  []string
}

// jumps are the rules that send built-in chains to fke's chains.
func jumps() []rule {
	return []rule{
		{"nat", "PREROUTING", []string{"-m", "comment", "--comment", "fke local nodes", "-j", ChainPrerouting}},
		{"nat", "OUTPUT", []string{"-m", "comment", "--comment", "fke local nodes", "-j", ChainOutput}},
		{"filter", "INPUT", []string{"-m", "comment", "--comment", "fke local nodes", "-j", ChainInput}},
		{"filter", "FORWARD", []string{"-m", "comment", "--comment", "fke local nodes", "-j", ChainForward}},
	}
}

// baseRules keep node addresses reachable only from the bridge and loopback,
// forward between nodes, and forward nothing between nodes and any other
// interface: node and pod traffic never leaves this machine.
func baseRules() []rule {
	nodes := NodeRange.String()
	return []rule{
		{"filter", ChainInput, []string{"-i", Bridge, "-j", "RETURN"}},
		{"filter", ChainInput, []string{"-i", "lo", "-j", "RETURN"}},
		{"filter", ChainInput, []string{"-d", nodes, "-j", "DROP"}},
		{"filter", ChainForward, []string{"-i", Bridge, "-o", Bridge, "-j", "ACCEPT"}},
		{"filter", ChainForward, []string{"-i", Bridge, "-j", "DROP"}},
		{"filter", ChainForward, []string{"-o", Bridge, "-j", "DROP"}},
	}
}

// exposeRules DNAT traffic to the gateway's port to the loopback port: from
// nodes, and from the host itself (so the URL nodes use works here too).
func exposeRules(port int) []rule {
	p := strconv.Itoa(port)
	return []rule{
		{"nat", ChainPrerouting, []string{
			"-i", Bridge, "-d", Gateway.String() + "/32", "-p", "tcp", "--dport", p,
			"-j", "DNAT", "--to-destination", "127.0.0.1:" + p,
		}},
		{"nat", ChainOutput, []string{
			"-d", Gateway.String() + "/32", "-p", "tcp", "--dport", p,
			"-j", "DNAT", "--to-destination", "127.0.0.1:" + p,
		}},
	}
}

func (h *Host) iptables(ctx context.Context, args ...string) ([]byte, error) {
	return h.run(ctx, "iptables", append([]string{"-w", "5"}, args...)...)
}

// ruleExists reports whether r is in its chain.
func (h *Host) ruleExists(ctx context.Context, r rule) bool {
	_, err := h.iptables(ctx, append([]string{"-t", r.table, "-C", r.chain}, r.spec...)...)
	return err == nil
}

// ensureRule appends r unless it is there.
func (h *Host) ensureRule(ctx context.Context, r rule) error {
	if h.ruleExists(ctx, r) {
		return nil
	}
	if _, err := h.iptables(ctx, append([]string{"-t", r.table, "-A", r.chain}, r.spec...)...); err != nil {
		return fmt.Errorf("adding iptables rule: %w", err)
	}
	return nil
}

// deleteRule deletes every copy of r; a missing rule is not an error.
func (h *Host) deleteRule(ctx context.Context, r rule) error {
	for range 10 {
		if !h.ruleExists(ctx, r) {
			return nil
		}
		// A rule gone meanwhile was removed by another fke tidying the
		// same host: not an error.
		if _, err := h.iptables(ctx, append([]string{"-t", r.table, "-D", r.chain}, r.spec...)...); err != nil && h.ruleExists(ctx, r) {
			return fmt.Errorf("deleting iptables rule: %w", err)
		}
	}
	return nil
}

func (h *Host) chainExists(ctx context.Context, table, chain string) bool {
	_, err := h.iptables(ctx, "-t", table, "-n", "-L", chain)
	return err == nil
}

// fkeChains are fke's own chains, by table.
var fkeChains = []struct{ table, chain string }{{"nat", ChainPrerouting}, {"nat", ChainOutput}, {"filter", ChainInput}, {"filter", ChainForward}}

// ensureChains makes fke's chains with their base rules and the jumps.
func (h *Host) ensureChains(ctx context.Context) error {
	for _, c := range fkeChains {
		if !h.chainExists(ctx, c.table, c.chain) {
			if _, err := h.iptables(ctx, "-t", c.table, "-N", c.chain); err != nil && !h.chainExists(ctx, c.table, c.chain) {
				return fmt.Errorf("creating iptables chain %s: %w", c.chain, err)
			}
		}
	}
	for _, r := range append(baseRules(), jumps()...) {
		if err := h.ensureRule(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// removeChains deletes the jumps, then flushes and deletes fke's chains.
func (h *Host) removeChains(ctx context.Context) error {
	var errs []error
	for _, r := range jumps() {
		if err := h.deleteRule(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range fkeChains {
		if !h.chainExists(ctx, c.table, c.chain) {
			continue
		}
		// A chain gone meanwhile was removed by another fke tidying the
		// same host: not an error.
		if _, err := h.iptables(ctx, "-t", c.table, "-F", c.chain); err != nil {
			if h.chainExists(ctx, c.table, c.chain) {
				errs = append(errs, fmt.Errorf("flushing %s: %w", c.chain, err))
			}
			continue
		}
		if _, err := h.iptables(ctx, "-t", c.table, "-X", c.chain); err != nil && h.chainExists(ctx, c.table, c.chain) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", c.chain, err))
		}
	}
	return errors.Join(errs...)
}

// Expose makes the loopback TCP port reachable from nodes at the gateway
// address (Gateway:port). The bridge must exist (EnsureBridge).
func (h *Host) Expose(ctx context.Context, port int) error {
	if port <= 0 || port > 65535 {
		return fmt.Errorf("exposing port %d: not a TCP port", port)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range exposeRules(port) {
		if err := h.ensureRule(ctx, r); err != nil {
			return fmt.Errorf("exposing port %d to nodes: %w", port, err)
		}
	}
	return nil
}

// Unexpose removes what Expose made for port. Idempotent.
func (h *Host) Unexpose(ctx context.Context, port int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.chainExists(ctx, "nat", ChainPrerouting) {
		return nil
	}
	for _, r := range exposeRules(port) {
		if err := h.deleteRule(ctx, r); err != nil {
			return fmt.Errorf("unexposing port %d: %w", port, err)
		}
	}
	return nil
}

// Rules returns fke's rules as iptables -S prints them (nat, then filter),
// jumps included: empty when nothing of fke's is installed.
func (h *Host) Rules(ctx context.Context) ([]string, error) {
	var out []string
	for _, table := range []string{"nat", "filter"} {
		text, err := h.iptables(ctx, "-t", table, "-S")
		if err != nil {
			return nil, fmt.Errorf("listing iptables %s rules: %w", table, err)
		}
		for _, line := range strings.Split(string(text), "\n") {
			if strings.Contains(line, "FKE-") {
				out = append(out, table+": "+line)
			}
		}
	}
	return out, nil
}
