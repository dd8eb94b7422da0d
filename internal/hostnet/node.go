package hostnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
)

// Node is the network of one node.
type Node struct {
	// Netns names its network namespace (NetnsName).
	Netns string
	// IP is its address in NodeRange.
	IP netip.Addr
}

// Veth returns the host end of the node's veth pair.
func (n Node) Veth() string { return VethName(n.Netns) }

// NetnsPath returns the file of the node's network namespace.
func (n Node) NetnsPath() string { return NetnsPath(n.Netns) }

// AllocateIP returns the lowest address of NodeRange after the gateway that
// is not in used, or an error when the range is full.
func AllocateIP(used []netip.Addr) (netip.Addr, error) {
	taken := make(map[netip.Addr]bool, len(used))
	for _, a := range used {
		taken[a] = true
	}
	for a := Gateway.Next(); NodeRange.Contains(a); a = a.Next() {
		if !NodeRange.Contains(a.Next()) { // broadcast
			break
		}
		if !taken[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free node address in %s: delete nodes first", NodeRange)
}

// nodeSysctls are set inside each node's namespace: it routes its pods'
// traffic, and bridged pod traffic passes iptables (kube-proxy's rules).
var nodeSysctls = []string{
	"net.ipv4.ip_forward=1",
	"net.bridge.bridge-nf-call-iptables=1",
}

// AddNode makes the node's network namespace and veth pair, addresses its
// end, and routes everything through the gateway. Idempotent. The bridge
// must exist (EnsureBridge).
func (h *Host) AddNode(ctx context.Context, n Node) error {
	if !n.IP.Is4() || !NodeRange.Contains(n.IP) || n.IP == Gateway {
		return fmt.Errorf("adding node network %s: address %s is not a node address in %s", n.Netns, n.IP, NodeRange)
	}
	if !strings.HasPrefix(n.Netns, NetnsPrefix) {
		return fmt.Errorf("adding node network %s: the namespace name must start with %s", n.Netns, NetnsPrefix)
	}
	if _, err := os.Stat(n.NetnsPath()); err != nil {
		if _, err := h.run(ctx, "ip", "netns", "add", n.Netns); err != nil {
			return fmt.Errorf("creating network namespace: %w", err)
		}
	}
	veth := n.Veth()
	if !h.linkExists(ctx, veth) {
		if _, err := h.run(ctx, "ip", "link", "add", veth, "type", "veth", "peer", "name", NodeInterface, "netns", n.Netns); err != nil {
			return fmt.Errorf("creating veth %s for %s: %w", veth, n.Netns, err)
		}
	}
	addr := netip.PrefixFrom(n.IP, NodeRange.Bits()).String()
	steps := [][]string{
		{"ip", "link", "set", veth, "master", Bridge, "up"},
		{"ip", "-n", n.Netns, "link", "set", "lo", "up"},
		{"ip", "-n", n.Netns, "addr", "replace", addr, "dev", NodeInterface},
		{"ip", "-n", n.Netns, "link", "set", NodeInterface, "up"},
		{"ip", "-n", n.Netns, "route", "replace", "default", "via", Gateway.String(), "dev", NodeInterface},
		append([]string{"nsenter", "--net=" + n.NetnsPath(), "--", "sysctl", "-q", "-w"}, nodeSysctls...),
	}
	for _, s := range steps {
		if _, err := h.run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("setting up the network of %s: %w", n.Netns, err)
		}
	}
	return nil
}

// RoutePods routes the pod range cidr to the node at nodeIP. Idempotent.
func (h *Host) RoutePods(ctx context.Context, cidr netip.Prefix, nodeIP netip.Addr) error {
	if _, err := h.run(ctx, "ip", "route", "replace", cidr.Masked().String(), "via", nodeIP.String(), "dev", Bridge); err != nil {
		return fmt.Errorf("routing pod range %s to node %s: %w", cidr, nodeIP, err)
	}
	return nil
}

// RemoveNode deletes the node's pod routes, veth pair and network namespace.
// Idempotent. The namespace goes once no process is left in it.
func (h *Host) RemoveNode(ctx context.Context, n Node) error {
	var errs []error
	routes, err := h.Routes(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range routes {
		if r.Dev == Bridge && r.Gateway == n.IP && r.Dst.IsValid() {
			if _, err := h.run(ctx, "ip", "route", "del", r.Dst.String(), "via", n.IP.String(), "dev", Bridge); err != nil {
				errs = append(errs, fmt.Errorf("deleting route %s: %w", r.Dst, err))
			}
		}
	}
	if veth := n.Veth(); h.linkExists(ctx, veth) {
		if _, err := h.run(ctx, "ip", "link", "del", veth); err != nil {
			errs = append(errs, fmt.Errorf("deleting veth %s: %w", veth, err))
		}
	}
	if _, err := os.Stat(n.NetnsPath()); err == nil {
		if _, err := h.run(ctx, "ip", "netns", "del", n.Netns); err != nil {
			errs = append(errs, fmt.Errorf("deleting network namespace %s: %w", n.Netns, err))
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists what fke made on the host and that is still there: node
// network namespaces, fke interfaces (the bridge included), routes through
// the bridge other than its own range, and fke's iptables rules. A host
// without fke nodes and bridge has none.
func (h *Host) Leftovers(ctx context.Context) ([]string, error) {
	var out []string
	entries, err := os.ReadDir(NetnsDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("listing %s: %w", NetnsDir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), NetnsPrefix) {
			out = append(out, "netns "+e.Name())
		}
	}
	links, err := h.run(ctx, "ip", "-o", "link", "show")
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	for _, line := range strings.Split(string(links), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, "fke") {
			out = append(out, "link "+name)
		}
	}
	routes, err := h.Routes(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		if r.Dev == Bridge && r.Gateway.IsValid() {
			out = append(out, fmt.Sprintf("route %s via %s", r.Dst, r.Gateway))
		}
	}
	rules, err := h.Rules(ctx)
	if err != nil {
		return nil, err
	}
	return append(out, rules...), nil
}

// NodeLeftovers lists what of node n is still on the host: its namespace,
// veth and pod routes.
func (h *Host) NodeLeftovers(ctx context.Context, n Node) ([]string, error) {
	var out []string
	if _, err := os.Stat(n.NetnsPath()); err == nil {
		out = append(out, "netns "+n.Netns)
	}
	if h.linkExists(ctx, n.Veth()) {
		out = append(out, "link "+n.Veth())
	}
	routes, err := h.Routes(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		if r.Dev == Bridge && r.Gateway == n.IP {
			out = append(out, fmt.Sprintf("route %s via %s", r.Dst, r.Gateway))
		}
	}
	return out, nil
}

// UsedIPs returns the addresses of every node namespace on this host, made
// by any fke (another data directory, `fke node join`), so that a new node
// never takes one.
func (h *Host) UsedIPs(ctx context.Context) ([]netip.Addr, error) {
	entries, err := os.ReadDir(NetnsDir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing %s: %w", NetnsDir, err)
	}
	var out []netip.Addr
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), NetnsPrefix) {
			continue
		}
		text, err := h.run(ctx, "ip", "-n", e.Name(), "-4", "-o", "addr", "show", "dev", NodeInterface)
		if err != nil {
			continue // a namespace being made or removed
		}
		out = append(out, parseAddrs(string(text))...)
	}
	return out, nil
}

// parseAddrs reads the IPv4 addresses of `ip -o addr show` lines.
func parseAddrs(text string) []netip.Addr {
	var out []netip.Addr
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" {
				if p, err := netip.ParsePrefix(f[i+1]); err == nil {
					out = append(out, p.Addr())
				}
			}
		}
	}
	return out
}
