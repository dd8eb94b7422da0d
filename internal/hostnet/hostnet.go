// Package hostnet gives real worker nodes on this machine their network: one
// host bridge (fke0) with the gateway address, a network namespace per node
// joined to the bridge by a veth pair, routes to each node's pod range, and
// iptables rules in fke's own chains that expose chosen loopback ports (the
// tenant API servers, the registry) to the nodes and keep node traffic on
// this machine. Everything it makes is named fke*/FKE-* so that cleanup
// finds it. It drives the ip, iptables and sysctl interfaces of the kernel
// through iproute2 and iptables; it needs root. Linux only.
package hostnet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"fke.dev/fke/internal/netrange"
)

// Addresses and names of the host network.
const (
	// Bridge is the host bridge every node's veth joins.
	Bridge = "fke0"
	// NetnsPrefix starts the name of every node's network namespace.
	NetnsPrefix = "fke-"
	// VethPrefix starts the host end of every node's veth pair.
	VethPrefix = "fkev"
	// NodeInterface is the node end of its veth pair, inside its namespace.
	NodeInterface = "eth0"
	// NetnsDir is where ip netns keeps named network namespaces.
	NetnsDir = "/run/netns"
)

// iptables chains fke owns; each is jumped to from the built-in chain of
// the same suffix, so cleanup is a flush and a delete.
const (
	ChainPrerouting = "FKE-PREROUTING" // nat: DNAT of exposed ports (from nodes)
	ChainOutput     = "FKE-OUTPUT"     // nat: DNAT of exposed ports (from the host)
	ChainInput      = "FKE-INPUT"      // filter: node addresses only from fke0
	ChainForward    = "FKE-FORWARD"    // filter: node traffic stays on the bridge
)

var (
	// NodeRange holds the gateway and every node address.
	NodeRange = netrange.LocalNodes
	// Gateway is the host's address on the bridge: nodes reach exposed
	// host services and each other's pod ranges through it.
	Gateway = netip.MustParseAddr("172.29.0.1")
)

// Runner runs a command and returns its combined output.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// ExecRunner runs commands with os/exec; a failure's error carries the output.
func ExecRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Host manages the host side of the node network. Its methods are safe for
// concurrent use; they are idempotent.
type Host struct {
	run Runner
	log *slog.Logger
	// procSys is the root of the sysctl tree (/proc/sys).
	procSys string

	mu sync.Mutex
}

// New returns a Host that runs commands with run (ExecRunner when nil).
func New(run Runner, log *slog.Logger) *Host {
	if run == nil {
		run = ExecRunner
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Host{run: run, log: log, procSys: "/proc/sys"}
}

// NetnsName returns the network namespace of node nodeName of the cluster
// with key clusterKey ("namespace/name"): fke-<namespace>.<cluster>.<node>,
// unique across clusters.
func NetnsName(clusterKey, nodeName string) string {
	return NetnsPrefix + strings.ReplaceAll(clusterKey, "/", ".") + "." + nodeName
}

// VethName returns the host end of the node's veth pair: a hash of the
// namespace name, as interface names are limited to 15 bytes.
func VethName(netns string) string {
	sum := sha256.Sum256([]byte(netns))
	return VethPrefix + hex.EncodeToString(sum[:])[:10]
}

// NetnsPath returns the file of the named network namespace.
func NetnsPath(netns string) string { return filepath.Join(NetnsDir, netns) }

// CheckRanges returns an error naming the route when a route of the host
// overlaps NodeRange (other than fke's own bridge), or when one of extra
// (pod ranges of clusters with local nodes) does.
func CheckRanges(routes []Route, extra ...netip.Prefix) error {
	for _, r := range routes {
		if r.Dev == Bridge || !r.Dst.IsValid() {
			continue
		}
		for _, p := range append([]netip.Prefix{NodeRange}, extra...) {
			if r.Dst.Overlaps(p) {
				return fmt.Errorf("the host route %s dev %s overlaps %s, which fke's local nodes use: remove that route or free the range", r.Dst, r.Dev, p)
			}
		}
	}
	return nil
}

// Route is one route of the host's main table.
type Route struct {
	Dst     netip.Prefix // invalid for the default route
	Gateway netip.Addr
	Dev     string
}

// Routes lists the host's IPv4 routes of the main table.
func (h *Host) Routes(ctx context.Context) ([]Route, error) {
	out, err := h.run(ctx, "ip", "-4", "-o", "route", "show")
	if err != nil {
		return nil, fmt.Errorf("listing host routes: %w", err)
	}
	return parseRoutes(string(out)), nil
}

// parseRoutes reads `ip -o route show` lines.
func parseRoutes(out string) []Route {
	var routes []Route
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var r Route
		if f[0] != "default" {
			dst := f[0]
			if !strings.Contains(dst, "/") {
				dst += "/32"
			}
			p, err := netip.ParsePrefix(dst)
			if err != nil {
				continue
			}
			r.Dst = p.Masked()
		}
		for i := 1; i+1 < len(f); i++ {
			switch f[i] {
			case "via":
				r.Gateway, _ = netip.ParseAddr(f[i+1])
			case "dev":
				r.Dev = f[i+1]
			}
		}
		routes = append(routes, r)
	}
	return routes
}

// EnsureBridge makes the bridge with the gateway address, turns on
// forwarding and route_localnet on it, and installs fke's chains. It first
// checks that no host route overlaps NodeRange.
func (h *Host) EnsureBridge(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	routes, err := h.Routes(ctx)
	if err != nil {
		return err
	}
	if err := CheckRanges(routes); err != nil {
		return err
	}
	if !h.linkExists(ctx, Bridge) {
		if _, err := h.run(ctx, "ip", "link", "add", Bridge, "type", "bridge"); err != nil && !h.linkExists(ctx, Bridge) {
			return fmt.Errorf("creating bridge %s: %w", Bridge, err)
		}
	}
	gw := netip.PrefixFrom(Gateway, NodeRange.Bits()).String()
	if _, err := h.run(ctx, "ip", "addr", "replace", gw, "dev", Bridge); err != nil {
		return fmt.Errorf("addressing bridge %s: %w", Bridge, err)
	}
	if _, err := h.run(ctx, "ip", "link", "set", Bridge, "up"); err != nil {
		return fmt.Errorf("bringing bridge %s up: %w", Bridge, err)
	}
	for key, val := range map[string]string{
		"net/ipv4/ip_forward":                         "1",
		"net/ipv4/conf/" + Bridge + "/route_localnet": "1",
	} {
		if err := h.sysctl(key, val); err != nil {
			return err
		}
	}
	return h.ensureChains(ctx)
}

func (h *Host) sysctl(key, val string) error {
	if err := os.WriteFile(filepath.Join(h.procSys, key), []byte(val), 0o644); err != nil {
		return fmt.Errorf("setting %s=%s: %w", strings.ReplaceAll(key, "/", "."), val, err)
	}
	return nil
}

func (h *Host) linkExists(ctx context.Context, name string) bool {
	_, err := h.run(ctx, "ip", "link", "show", "dev", name)
	return err == nil
}

// RemoveBridge deletes the bridge and fke's chains. Call it when no node is
// left; it is idempotent, and what another fke on the same host removes
// meanwhile (two `fke down` at once) is not an error.
func (h *Host) RemoveBridge(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	if err := h.removeChains(ctx); err != nil {
		errs = append(errs, err)
	}
	if h.linkExists(ctx, Bridge) {
		if _, err := h.run(ctx, "ip", "link", "del", Bridge); err != nil && h.linkExists(ctx, Bridge) {
			errs = append(errs, fmt.Errorf("deleting bridge %s: %w", Bridge, err))
		}
	}
	return errors.Join(errs...)
}
