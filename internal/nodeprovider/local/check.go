package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/hostnet"
)

// Check is one prerequisite of local nodes.
type Check struct {
	// Name says what is checked.
	Name string
	// Err is nil when the check passed.
	Err error
	// Fix says how to fix a failed check.
	Fix string
}

// CNIPlugins are the containernetworking plugins local nodes use.
var CNIPlugins = []string{"bridge", "host-local", "portmap", "loopback"}

// Checks runs every prerequisite check of local nodes: root, cgroups,
// containerd, runc, the CNI plugins, iptables, conntrack, util-linux and
// iproute2, bridge netfilter, the free node address range, the kubelet and
// kube-proxy binaries.
func Checks(ctx context.Context, bins binaries.Finder, host *hostnet.Host) []Check {
	const apt = "apt-get install -y containerd runc containernetworking-plugins iptables conntrack util-linux iproute2 (the packages in hack/ci-packages.txt)"
	var out []Check
	add := func(name string, err error, fix string) { out = append(out, Check{Name: name, Err: err, Fix: fix}) }

	var rootErr error
	if os.Geteuid() != 0 {
		rootErr = fmt.Errorf("running as uid %d", os.Geteuid())
	}
	add("root", rootErr, "run fke up (or fke-manager) as root: local nodes make network namespaces, mounts and cgroups")

	hs, err := cgroupHierarchies()
	if err == nil && len(hs) == 0 {
		err = errors.New("no cgroup hierarchy is mounted under " + cgroupFS)
	}
	add("cgroups", err, "mount the cgroup hierarchies under "+cgroupFS+" (cgroup v1 controllers or cgroup2)")

	for _, bin := range []string{"containerd", "runc", "ctr", "iptables", "conntrack", "nsenter", "unshare", "mount", "ip", "sysctl"} {
		_, err := exec.LookPath(bin)
		add(bin, err, apt)
	}
	var missing []string
	for _, p := range CNIPlugins {
		if _, err := os.Stat(filepath.Join(CNIBinDir, p)); err != nil {
			missing = append(missing, p)
		}
	}
	var cniErr error
	if len(missing) > 0 {
		cniErr = fmt.Errorf("missing %s in %s", strings.Join(missing, ", "), CNIBinDir)
	}
	add("CNI plugins", cniErr, "apt-get install -y containernetworking-plugins")

	var brErr error
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err != nil {
		brErr = errors.New("bridge netfilter is not loaded (no net.bridge.bridge-nf-call-iptables)")
	}
	add("bridge netfilter", brErr, "modprobe br_netfilter (Services of pods on the same node need it)")

	var rangeErr error
	if host != nil {
		routes, err := host.Routes(ctx)
		if err == nil {
			err = hostnet.CheckRanges(routes)
		}
		rangeErr = err
	}
	add("free node range "+hostnet.NodeRange.String(), rangeErr, "remove the host route that overlaps it")

	for _, b := range []string{binaries.Kubelet, binaries.KubeProxy} {
		_, err := bins.Path(b)
		add(b, err, "build the upstream binaries with `make binaries` or set FKE_BIN_DIR")
	}
	return out
}

// Failed returns the failed checks.
func Failed(checks []Check) []Check {
	var out []Check
	for _, c := range checks {
		if c.Err != nil {
			out = append(out, c)
		}
	}
	return out
}

// Unavailable returns why local nodes cannot be made here (nil when they can).
func Unavailable(checks []Check) error {
	var errs []error
	for _, c := range Failed(checks) {
		errs = append(errs, fmt.Errorf("%s: %w (fix: %s)", c.Name, c.Err, c.Fix))
	}
	return errors.Join(errs...)
}
