package localnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controller/machine"
	"fke.dev/fke/internal/hostnet"
	localnodes "fke.dev/fke/internal/nodeprovider/local"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/internal/versions"
	"fke.dev/fke/test/testenv"
)

// testPortForward forwards a local port to the server pod's 8080 through
// the API server and the kubelet, as `kubectl port-forward` does.
func testPortForward(t *testing.T, cfg *rest.Config, cs kubernetes.Interface, pod string) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("portforward")
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, req.URL())
	stop, ready := make(chan struct{}), make(chan struct{})
	var errOut bytes.Buffer
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("port-forward: %v (%s)", err, errOut.String())
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		done <- err
		t.Fatalf("port-forward ended before it was ready: %v (%s)", err, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("port-forward not ready after 30s")
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("forwarded ports %v, %v", ports, err)
	}
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))) + "/"
	if body := httpGet(t, url); !strings.Contains(body, "hello from "+pod) {
		t.Errorf("GET %s through port-forward: %q, want the server's answer", url, body)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testAttach attaches to the server container's output, as `kubectl
// attach` does, and sees the line the server prints for a request made
// after the attach.
func testAttach(t *testing.T, cfg *rest.Config, cs kubernetes.Interface, pod, podIP string) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: "app", Stdout: true, Stderr: true}, clientgoscheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, req.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out}) }()
	defer func() {
		cancel()
		<-done
	}()
	// Requests from a client of its own address (the host's bridge address)
	// until the attached stream shows one.
	testenv.Eventually(t, 30*time.Second, "a request seen through attach", func() error {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("attach ended: %v (%s)", err, out.String())
		default:
		}
		c := http.Client{Timeout: 3 * time.Second}
		if resp, err := c.Get("http://" + net.JoinHostPort(podIP, "8080") + "/attach-probe"); err == nil {
			resp.Body.Close()
		}
		if !strings.Contains(out.String(), "request from") {
			return fmt.Errorf("attached output %q", out.String())
		}
		return nil
	})
}

// testFrozenKubelet stops node's kubelet with SIGSTOP (the supervisor
// does not see it exit, so it does not restart it): the Node stops
// reporting and kube-controller-manager marks it NotReady once its
// node-monitor grace period passed; SIGCONT brings it back Ready.
func testFrozenKubelet(t *testing.T, cs kubernetes.Interface, node string) {
	pid := kubeletPid(t, node)
	if pid == 0 {
		t.Fatalf("no kubelet of node %s", node)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	defer thaw()
	start := time.Now()
	// kube-controller-manager's --node-monitor-grace-period is the upstream
	// default (50 s), checked every --node-monitor-period (5 s).
	testenv.Eventually(t, 90*time.Second, "node "+node+" NotReady", func() error {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if nodeutil.NodeReady(n) {
			return fmt.Errorf("node %s still Ready", node)
		}
		return nil
	})
	t.Logf("FIGURE kubelet frozen -> Node NotReady: %s", time.Since(start).Round(100*time.Millisecond))
	thaw()
	start = time.Now()
	testenv.Eventually(t, time.Minute, "node "+node+" Ready again", func() error {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeutil.NodeReady(n) {
			return fmt.Errorf("node %s not Ready", node)
		}
		return nil
	})
	t.Logf("FIGURE kubelet thawed -> Node Ready: %s", time.Since(start).Round(100*time.Millisecond))
	if p := kubeletPid(t, node); p != pid {
		t.Errorf("kubelet pid %d after the freeze, was %d: it was restarted, not thawed", p, pid)
	}
}

// testFailedLaunch makes a node that fails after Create returned: the
// image archive every node imports is corrupt while a pool of one node is
// created. The Machine must say why (condition and event, shown by `fke
// nodepool get`); deleting the pool removes the broken node.
func testFailedLaunch(t *testing.T, e *testenv.Env, archive string) {
	orig, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if err := os.WriteFile(archive, orig, 0o644); err != nil {
			t.Error(err)
		}
	}
	defer restore()
	if err := os.WriteFile(archive, []byte("not an image archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.MustRun("nodepool", "create", "demo/broken", "--provider", "local", "--instance-type", "cpu-small", "--replicas", "1")
	var m fkev1.Machine
	testenv.Eventually(t, 2*time.Minute, "the machine of pool broken Failed", func() error {
		var ms fkev1.MachineList
		if err := e.Client().List(t.Context(), &ms, client.InNamespace("default"),
			client.MatchingLabels{fkev1.LabelCluster: "demo", fkev1.LabelNodePool: "broken"}); err != nil {
			return err
		}
		if len(ms.Items) != 1 {
			return fmt.Errorf("%d machines", len(ms.Items))
		}
		m = ms.Items[0]
		cond := meta.FindStatusCondition(m.Status.Conditions, fkev1.ConditionReady)
		if m.Status.Phase != fkev1.MachineFailed || cond == nil || cond.Reason != machine.ReasonInstanceFailed {
			return fmt.Errorf("machine %s phase %s, Ready %+v", m.Name, m.Status.Phase, cond)
		}
		if !strings.Contains(cond.Message, "importing image") {
			t.Errorf("machine %s failed with %q, want the failed image import", m.Name, cond.Message)
		}
		return nil
	})
	restore()
	testenv.Eventually(t, 30*time.Second, "fke nodepool get says why", func() error {
		out := e.MustRun("nodepool", "get", "demo/broken")
		for _, want := range []string{"Failed machines:", m.Name + ": InstanceFailed: ", "InstanceFailed", "instance " + m.Status.ProviderID + " failed: importing image"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("no %q in:\n%s", want, out)
			}
		}
		return nil
	})
	e.MustRun("nodepool", "delete", "demo/broken", "--wait")
	netns := hostnet.NetnsName("default/demo", m.Status.NodeName)
	if _, err := os.Stat(filepath.Join(hostnet.NetnsDir, netns)); err == nil {
		t.Errorf("netns %s of the failed node is left after its pool was deleted", netns)
	}
	if pids := processesOf(t, "--hostname-override="+m.Status.NodeName); len(pids) > 0 {
		t.Errorf("processes %v of the failed node are left", pids)
	}
}

// testSecondCluster runs a second cluster with one local node beside the
// first, on the previous Kubernetes minor: its own pod and Service ranges,
// a pod reaching its own Service. The cluster is upgraded: its node is
// replaced by one whose real kubelet runs the new version, which runs pods.
// Then `fke cluster delete` leaves nothing of its nodes while the first
// cluster's nodes stay Ready.
func testSecondCluster(t *testing.T, e *testenv.Env, first kubernetes.Interface, firstNodes int) {
	e.MustRun("cluster", "create", "other", "--version", versions.Previous, "--service-cidr", "10.97.0.0/16", "--wait")
	e.MustRun("nodepool", "create", "other/cpu", "--provider", "local", "--instance-type", "cpu-small", "--replicas", "1")
	demo, other := e.Cluster("demo"), e.Cluster("other")
	for _, pair := range [][2]string{
		{demo.Spec.Network.PodCIDR, other.Spec.Network.PodCIDR},
		{demo.Spec.Network.ServiceCIDR, other.Spec.Network.ServiceCIDR},
		{demo.Spec.Network.PodCIDR, other.Spec.Network.ServiceCIDR},
		{other.Spec.Network.PodCIDR, demo.Spec.Network.ServiceCIDR},
	} {
		if netip.MustParsePrefix(pair[0]).Overlaps(netip.MustParsePrefix(pair[1])) {
			t.Errorf("ranges %s and %s of the two clusters overlap", pair[0], pair[1])
		}
	}
	cs := e.Tenant("other")
	node := oneReadyNode(t, cs, versions.Previous)
	if cidr, err := netip.ParsePrefix(node.Spec.PodCIDR); err != nil || !netip.MustParsePrefix(other.Spec.Network.PodCIDR).Overlaps(cidr) {
		t.Errorf("node %s has pod range %q, want one inside %s", node.Name, node.Spec.PodCIDR, other.Spec.Network.PodCIDR)
	}
	runPod(t, cs, "server", node.Name, "serve")
	svc := expose(t, cs, "server")
	if ip := netip.MustParseAddr(svc.Spec.ClusterIP); !netip.MustParsePrefix(other.Spec.Network.ServiceCIDR).Contains(ip) {
		t.Errorf("Service IP %s outside the cluster's range %s", ip, other.Spec.Network.ServiceCIDR)
	}
	client := runPod(t, cs, "client", node.Name, "get", "http://"+svc.Spec.ClusterIP+"/")
	waitSucceeded(t, cs, client.Name)
	if logs := podLogs(t, cs, client.Name); !strings.Contains(logs, "hello from server") {
		t.Errorf("client logs %q, want the server's answer through its Service", logs)
	}

	old := node
	start := time.Now()
	e.MustRun("cluster", "upgrade", "other", "--version", versions.Default)
	node = oneReadyNode(t, cs, versions.Default)
	t.Logf("FIGURE upgrade %s → %s with one local node: %s (node %s replaced by %s)", versions.Previous, versions.Default, time.Since(start).Round(10*time.Millisecond), old.Name, node.Name)
	if node.Name == old.Name {
		t.Fatalf("node %s was not replaced", node.Name)
	}
	// The server pod went with the old node; the same pod on the new node
	// serves the same Service.
	testenv.Eventually(t, time.Minute, "pod server gone with the old node", func() error {
		if _, err := cs.CoreV1().Pods("default").Get(t.Context(), "server", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod server: %v", err)
		}
		return nil
	})
	runPod(t, cs, "server", node.Name, "serve")
	runPod(t, cs, "after-upgrade", node.Name, "get", "http://"+svc.Spec.ClusterIP+"/")
	waitSucceeded(t, cs, "after-upgrade")
	if logs := podLogs(t, cs, "after-upgrade"); !strings.Contains(logs, "hello from server") {
		t.Errorf("a pod on the upgraded node got %q, want the server's answer through its Service", logs)
	}
	nodeGone(t, e, other, old)

	e.MustRun("cluster", "delete", "other", "--wait")
	nodeGone(t, e, other, node)
	list, err := first.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for i := range list.Items {
		if nodeutil.NodeReady(&list.Items[i]) {
			ready++
		}
	}
	if ready < firstNodes {
		t.Errorf("%d of cluster demo's nodes Ready after cluster other was deleted, want %d", ready, firstNodes)
	}
}

// oneReadyNode waits until cs has exactly one Node, Ready, whose kubelet
// reports version, and returns it.
func oneReadyNode(t *testing.T, cs kubernetes.Interface, version string) corev1.Node {
	t.Helper()
	var node corev1.Node
	testenv.Eventually(t, 3*time.Minute, "one Ready node at "+version, func() error {
		list, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || !nodeutil.NodeReady(&list.Items[0]) {
			return fmt.Errorf("%d nodes, none Ready", len(list.Items))
		}
		if v := list.Items[0].Status.NodeInfo.KubeletVersion; v != version {
			return fmt.Errorf("node %s runs kubelet %s", list.Items[0].Name, v)
		}
		node = list.Items[0]
		return nil
	})
	return node
}

// nodeGone waits until nothing is left on the host of node, a local node
// of cluster other: network and mount namespaces, mounts, directory,
// processes, cgroups, the API port's rule (once the cluster is gone) and
// routes (once the cluster is gone).
func nodeGone(t *testing.T, e *testenv.Env, other *fkev1.Cluster, node corev1.Node) {
	t.Helper()
	port := other.Status.Ports.APIServer
	clusterGone := func() bool {
		var cl fkev1.Cluster
		return apierrors.IsNotFound(e.Client().Get(t.Context(), client.ObjectKeyFromObject(other), &cl))
	}()
	netns := hostnet.NetnsName("default/other", node.Name)
	n := hostnet.Node{Netns: netns, IP: mustAddr(t, internalIP(&node))}
	testenv.Eventually(t, time.Minute, "nothing left of cluster other's node", func() error {
		left, err := hostnet.New(nil, nil).NodeLeftovers(t.Context(), n)
		if err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(localnodes.MountNSDir, netns)); err == nil {
			left = append(left, "mount namespace file")
		}
		if mounts, _ := localnodes.MountsUnder(filepath.Join(e.DataDir, "nodes", "default", "other")); len(mounts) > 0 {
			left = append(left, fmt.Sprintf("mounts %v", mounts))
		}
		if _, err := os.Stat(filepath.Join(e.DataDir, "nodes", "default", "other", node.Name)); err == nil {
			left = append(left, "node directory")
		}
		if pids := processesOf(t, node.Name); len(pids) > 0 {
			left = append(left, fmt.Sprintf("processes %v", pids))
		}
		if cg, _ := filepath.Glob("/sys/fs/cgroup/*/fke/" + netns); len(cg) > 0 {
			left = append(left, fmt.Sprintf("cgroups %v", cg))
		}
		if !clusterGone {
			if len(left) > 0 {
				return fmt.Errorf("left: %v", left)
			}
			return nil
		}
		rules, err := hostnet.New(nil, nil).Rules(t.Context())
		if err != nil {
			return err
		}
		for _, r := range rules {
			if strings.Contains(r, "--dport "+strconv.Itoa(int(port))+" ") {
				left = append(left, "iptables rule "+r)
			}
		}
		if routes, err := hostnet.New(nil, nil).Routes(t.Context()); err == nil {
			for _, r := range routes {
				if r.Dst.IsValid() && r.Dst.Overlaps(netip.MustParsePrefix(other.Spec.Network.PodCIDR)) {
					left = append(left, fmt.Sprintf("route %s", r.Dst))
				}
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		return nil
	})
}

// testStoppedKubeletRepaired stops (SIGSTOP) the kubelet of the one node of
// pool demo/cpu, whose repair gives a node 5 s of NotReady: once the node
// controller marks it NotReady (50 s grace), the machine is replaced by a
// new Ready node, with a Repairing event, and nothing of the old node is
// left running.
func testStoppedKubeletRepaired(t *testing.T, e *testenv.Env, cs kubernetes.Interface) {
	ctx := t.Context()
	key := client.ObjectKey{Namespace: "default", Name: fkev1.NodePoolObjectName("demo", "cpu")}
	c := e.Client()
	var pool fkev1.NodePool
	if err := c.Get(ctx, key, &pool); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(pool.DeepCopy())
	pool.Spec.Repair = fkev1.NodePoolRepair{NodeUnhealthyTimeout: &metav1.Duration{Duration: 5 * time.Second}}
	if err := c.Patch(ctx, &pool, patch); err != nil {
		t.Fatal(err)
	}
	old := oneReadyNode(t, cs, versions.Default)
	pid := kubeletPid(t, old.Name)
	if pid == 0 {
		t.Fatalf("no kubelet of node %s", old.Name)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) // gone with its node when repaired
	start := time.Now()
	testenv.Eventually(t, 3*time.Minute, "node "+old.Name+" replaced by a Ready node", func() error {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i := range list.Items {
			if n := &list.Items[i]; n.Name != old.Name && nodeutil.NodeReady(n) && len(list.Items) == 1 {
				return nil
			}
		}
		return fmt.Errorf("%d nodes, no new Ready one yet", len(list.Items))
	})
	t.Logf("FIGURE kubelet stopped -> replacement node Ready (50 s grace, 5 s repair timeout): %s", time.Since(start).Round(100*time.Millisecond))
	var events corev1.EventList
	if err := c.List(ctx, &events, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	repaired := false
	for _, ev := range events.Items {
		repaired = repaired || (ev.Reason == fkev1.ConditionRepairing && strings.Contains(ev.Message, fkev1.ReasonNodeNotReady))
	}
	if !repaired {
		t.Errorf("no Repairing event naming %s", fkev1.ReasonNodeNotReady)
	}
	testenv.Eventually(t, time.Minute, "no process of node "+old.Name, func() error {
		if pids := processesOf(t, old.Name); len(pids) > 0 {
			return fmt.Errorf("processes %v left", pids)
		}
		return nil
	})
}
