// Package netrange chooses address ranges that collide with nothing: a pod
// range per cluster that overlaps no route of this host, no other cluster's
// ranges and no range reserved by fke.
package netrange

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
)

// PodBlockBits is the prefix length of the pod range fke picks for a
// cluster: a /14 holds 1,024 node ranges of /24.
const PodBlockBits = 14

// PodPool is where pod ranges are picked from, in order: 10.112.0.0/14
// first (inside the /12 that was every cluster's range before ranges were
// picked), then on through 10.0.0.0/8, wrapping around.
var PodPool = netip.MustParsePrefix("10.0.0.0/8")

// firstPodBlock is the block the search starts at.
var firstPodBlock = netip.MustParsePrefix("10.112.0.0/14")

// LocalNodes holds the addresses of local nodes on this host: the host
// bridge's gateway and one address per node.
var LocalNodes = netip.MustParsePrefix("172.29.0.0/16")

// Reserved are ranges no pod range may overlap: the default service range
// and the local-node range of the host bridge.
var Reserved = []netip.Prefix{
	netip.MustParsePrefix("10.96.0.0/16"),
	LocalNodes,
}

// Overlaps reports whether a and b share an address.
func Overlaps(a, b netip.Prefix) bool { return a.Overlaps(b) }

// PickPodCIDR returns the first /14 of PodPool, starting at 10.112.0.0/14,
// that overlaps none of avoid (host routes, other clusters' pod and service
// ranges) and none of Reserved. Pure.
func PickPodCIDR(avoid []netip.Prefix) (netip.Prefix, error) {
	step := uint32(1) << (32 - PodBlockBits)
	base := be(PodPool.Addr())
	n := uint32(1) << (PodBlockBits - PodPool.Bits())
	start := (be(firstPodBlock.Addr()) - base) / step
	for i := range n {
		block := netip.PrefixFrom(addr(base+((start+i)%n)*step), PodBlockBits)
		if !overlapsAny(block, avoid) && !overlapsAny(block, Reserved) {
			return block, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free /%d pod range left in %s: every block overlaps a host route or another cluster; "+
		"set spec.network.podCIDR (fke cluster create --pod-cidr) to a range of your own", PodBlockBits, PodPool)
}

// LocalCluster is a cluster whose pod range the host routes to its local
// nodes.
type LocalCluster struct {
	// Key names the cluster: namespace/name.
	Key string
	// PodCIDR is the cluster's pod range.
	PodCIDR netip.Prefix
}

// CheckLocalPodRange returns why cluster's pod range cannot be routed to
// local nodes on this host beside others, the clusters that use local nodes
// already: it overlaps LocalNodes, or the pod range of one of others (the
// host would route the same addresses to the nodes of both). Entries of
// others with cluster's key are cluster itself and skipped; nil when the
// range is free (an invalid range overlaps nothing: callers check that
// a range is set). Pure: the local node provider checks a cluster before it
// makes a node, the admission webhook when a local node pool is created.
func CheckLocalPodRange(cluster LocalCluster, others []LocalCluster) error {
	mine := cluster.PodCIDR.Masked()
	var overlaps []string
	if mine.Overlaps(LocalNodes) {
		overlaps = append(overlaps, fmt.Sprintf("%s, the addresses of local nodes on this host", LocalNodes))
	}
	seen := map[LocalCluster]bool{}
	for _, o := range others {
		o.PodCIDR = o.PodCIDR.Masked()
		if o.Key == cluster.Key || seen[o] || !o.PodCIDR.Overlaps(mine) {
			continue
		}
		seen[o] = true
		overlaps = append(overlaps, fmt.Sprintf("pod range %s of cluster %s, which uses local nodes", o.PodCIDR, o.Key))
	}
	if len(overlaps) == 0 {
		return nil
	}
	return fmt.Errorf("cluster %s's pod range %s overlaps %s: create the cluster with a pod range of its own (spec.network.podCIDR, `fke cluster create --pod-cidr`)",
		cluster.Key, mine, strings.Join(overlaps, " and "))
}

func overlapsAny(p netip.Prefix, set []netip.Prefix) bool {
	for _, q := range set {
		if q.IsValid() && p.Overlaps(q) {
			return true
		}
	}
	return false
}

func be(a netip.Addr) uint32 { b := a.As4(); return binary.BigEndian.Uint32(b[:]) }

func addr(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// HostRoutes returns the IPv4 destinations of this host's routing table
// (/proc/net/route), without the default route.
func HostRoutes() ([]netip.Prefix, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, fmt.Errorf("reading host routes: %w", err)
	}
	defer f.Close()
	return ParseRoutes(f)
}

// ParseRoutes parses the format of /proc/net/route (destination and mask in
// little-endian hex), skipping default routes. Pure.
func ParseRoutes(r io.Reader) ([]netip.Prefix, error) {
	var out []netip.Prefix
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue // header
		}
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		dst, err1 := leAddr(f[1])
		mask, err2 := leAddr(f[7])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("parsing route %q: %w", sc.Text(), err)
		}
		bits := 0
		for m := be(mask); m&(1<<31) != 0; m <<= 1 {
			bits++
		}
		if bits == 0 {
			continue
		}
		out = append(out, netip.PrefixFrom(dst, bits).Masked())
	}
	return out, sc.Err()
}

func leAddr(h string) (netip.Addr, error) {
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 4 {
		return netip.Addr{}, fmt.Errorf("bad hex address %q", h)
	}
	return netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]}), nil
}
