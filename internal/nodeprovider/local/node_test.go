package local

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/supervisor"
)

// TestNodeRuntimeRemovesEverything runs a node on the real host up to its
// containerd (no kubelet binary is given, so the node then fails and says
// why) and checks that Remove leaves no process, mount, namespace, cgroup,
// veth, route or file behind.
func TestNodeRuntimeRemovesEverything(t *testing.T) {
	if err := Unavailable(Checks(t.Context(), nopFinder(), hostnet.New(nil, nil))[:15]); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	host := hostnet.New(nil, nil)
	if left, err := host.Leftovers(t.Context()); err != nil || len(left) > 0 {
		t.Skipf("another fke runs local nodes here (%v, %v)", left, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := host.EnsureBridge(ctx); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "fke-node-")
	if err != nil {
		t.Fatal(err)
	}
	net := hostnet.Node{Netns: hostnet.NetnsName("test/runtime", "n1"), IP: netip.MustParseAddr("172.29.0.250")}
	n := NewNode(NodeConfig{
		Name: "n1", Dir: dir, Net: net, PauseImage: "fke.invalid/pause:none",
		KubeletPath: "/nonexistent/kubelet", KubeProxyPath: "/nonexistent/kube-proxy",
	}, host, supervisor.NewGroup(nil), nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = n.Remove(ctx)
		_ = host.RemoveBridge(ctx)
		_, _ = hostnet.ExecRunner(ctx, "umount", MountNSDir)
		_ = removeCgroup(CgroupParent)
		os.RemoveAll(dir)
	})
	if err := n.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Prepare(ctx); err != nil {
		t.Fatalf("second Prepare: %v", err)
	}
	n.Start()
	for {
		state, msg := n.State()
		if state == "Failed" {
			if !strings.Contains(msg, "kubelet") {
				t.Errorf("failed node says %q, want the kubelet named", msg)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node state %s %s", state, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// containerd runs in the node's namespaces, its bind mounts only there.
	pids, err := nsPids(n.MountNS(), "mnt")
	if err != nil || len(pids) == 0 {
		t.Fatalf("no process in the node's mount namespace (%v): containerd did not run there", err)
	}
	if out, err := exec.CommandContext(ctx, "nsenter", "--mount="+n.MountNS(), "--", "findmnt", "-n", KubeletRootDir).CombinedOutput(); err != nil {
		t.Errorf("%s is not mounted in the node: %v %s", KubeletRootDir, err, out)
	}
	if isMountPoint(KubeletRootDir, "") {
		t.Errorf("%s is mounted on the host", KubeletRootDir)
	}
	if err := n.SetPodCIDR(ctx, netip.MustParsePrefix("10.250.9.0/24")); err != nil {
		t.Fatal(err)
	}
	if err := n.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := host.NodeLeftovers(ctx, net)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.MountNS()); err == nil {
		left = append(left, "mount namespace file")
	}
	if _, err := os.Stat(dir); err == nil {
		left = append(left, "node directory")
	}
	if cg, _ := filepath.Glob(filepath.Join(cgroupFS, "*", strings.TrimPrefix(n.CgroupRoot(), "/"))); len(cg) > 0 {
		left = append(left, "cgroups")
	}
	if pids, _ := nsPids(n.MountNS(), "mnt"); len(pids) > 0 {
		left = append(left, "processes")
	}
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func nopFinder() binaries.Finder { return binaries.Finder{Dir: os.TempDir()} }
