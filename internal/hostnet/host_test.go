package hostnet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireRoot skips (fails under CI) when the host network cannot be changed.
func requireRoot(t *testing.T) {
	t.Helper()
	var why string
	if os.Geteuid() != 0 {
		why = "changing the host network needs root"
	}
	for _, bin := range []string{"ip", "iptables", "nsenter", "sysctl"} {
		if _, err := exec.LookPath(bin); err != nil && why == "" {
			why = bin + " not installed (see hack/ci-packages.txt)"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// TestHostNetwork makes the bridge and two node namespaces on the real host:
// the nodes reach each other and an exposed loopback port of the host at
// the gateway, not an unexposed one, and removing everything leaves nothing.
func TestHostNetwork(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	h := New(nil, nil)
	if left, err := h.Leftovers(ctx); err != nil || len(left) > 0 {
		t.Skipf("the host already has fke networking (%v, %v): another fke runs here", left, err)
	}
	a := Node{Netns: NetnsName("test/hostnet", "a"), IP: netip.MustParseAddr("172.29.0.201")}
	b := Node{Netns: NetnsName("test/hostnet", "b"), IP: netip.MustParseAddr("172.29.0.202")}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, n := range []Node{a, b} {
			if err := h.RemoveNode(ctx, n); err != nil {
				t.Error(err)
			}
		}
		if err := h.RemoveBridge(ctx); err != nil {
			t.Error(err)
		}
		if left, err := h.Leftovers(ctx); err != nil || len(left) > 0 {
			t.Errorf("left behind: %v (%v)", left, err)
		}
	})
	if err := h.EnsureBridge(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureBridge(ctx); err != nil {
		t.Fatalf("second EnsureBridge: %v", err)
	}
	for _, n := range []Node{a, b, a} {
		if err := h.AddNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	exposed, closed := listen(t), listen(t)
	if err := h.Expose(ctx, exposed); err != nil {
		t.Fatal(err)
	}
	if err := h.Expose(ctx, exposed); err != nil {
		t.Fatal(err)
	}
	inB := listenIn(t, b)
	if out, err := inNode(ctx, a, "bash", "-c", "exec 3<>/dev/tcp/"+b.IP.String()+"/"+strconv.Itoa(inB)+" && head -c 5 <&3"); err != nil || string(out) != "hello" {
		t.Errorf("node a reading from node b: %q, %v", out, err)
	}
	if out, err := inNode(ctx, a, "bash", "-c", "exec 3<>/dev/tcp/"+Gateway.String()+"/"+strconv.Itoa(exposed)+" && head -c 5 <&3"); err != nil || string(out) != "hello" {
		t.Errorf("node a reading the exposed port: %q, %v", out, err)
	}
	if out, err := inNode(ctx, a, "timeout", "3", "bash", "-c", "exec 3<>/dev/tcp/"+Gateway.String()+"/"+strconv.Itoa(closed)); err == nil {
		t.Errorf("node a reached the unexposed port %d: %s", closed, out)
	}
	if out, err := exec.CommandContext(ctx, "bash", "-c", "exec 3<>/dev/tcp/"+Gateway.String()+"/"+strconv.Itoa(exposed)+" && head -c 5 <&3").CombinedOutput(); err != nil || string(out) != "hello" {
		t.Errorf("the host reading the exposed port at the gateway: %q, %v", out, err)
	}
	if err := h.Unexpose(ctx, exposed); err != nil {
		t.Fatal(err)
	}
	rules, err := h.Rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(rules, "\n"), "--dport "+strconv.Itoa(exposed)) {
		t.Errorf("rule of port %d left after Unexpose: %v", exposed, rules)
	}
	if err := h.RoutePods(ctx, netip.MustParsePrefix("10.250.7.0/24"), b.IP); err != nil {
		t.Fatal(err)
	}
	if err := h.RemoveNode(ctx, b); err != nil {
		t.Fatal(err)
	}
	if left, err := h.NodeLeftovers(ctx, b); err != nil || len(left) > 0 {
		t.Errorf("node b left behind: %v (%v)", left, err)
	}
}

// listen serves "hello" on a loopback port and returns the port.
func listen(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, l)
}

// listenIn serves "hello" on a port of node n's address and returns the port.
func listenIn(t *testing.T, n Node) int {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open(n.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	l, lerr := net.Listen("tcp", n.IP.String()+":0")
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		panic(err) // the thread is in the wrong namespace; it must not be reused
	}
	if lerr != nil {
		t.Fatal(lerr)
	}
	return serve(t, l)
}

func serve(t *testing.T, l net.Listener) int {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "hello")
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

func inNode(ctx context.Context, n Node, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.NetnsPath(), "--"}, args...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%v: %w", args, err)
	}
	return out, nil
}
