package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/supervisor"
)

// Names of a node's processes (in its supervisor group, prefixed with the
// network namespace name).
const (
	ProcContainerd = "containerd"
	ProcKubelet    = "kubelet"
	ProcKubeProxy  = "kube-proxy"
)

const (
	stopGracePeriod = 5 * time.Second
	// maxRestarts: a node process that exits this many times in a row
	// (backoff up to 10s) leaves its node Failed.
	maxRestarts = 20
	// containerdStartTimeout bounds the wait for a node's containerd to
	// serve the CRI.
	containerdStartTimeout = 2 * time.Minute
	// podCIDRPoll is how often the node reads its Node for spec.podCIDR.
	podCIDRPoll = 200 * time.Millisecond
)

// nodeGOGC is the Go garbage collector's target (GOGC) of a node's
// containerd, kubelet and kube-proxy: most of an idle node's anonymous
// memory is heap the runtime keeps between collections (GOGC=100 lets it
// grow to twice the live heap), and at 50 it grows to 1.5 times it, for a
// little more collection work on processes that allocate little once
// running. Lower values save little more (figures in bench/README.md).
const nodeGOGC = "50"

// nodeEnv is the environment of a node's processes (see supervisor.GoEnv).
func nodeEnv() []string { return supervisor.GoEnv(nodeGOGC) }

// NodeConfig is everything one node runs with.
type NodeConfig struct {
	// Name is the Node's name.
	Name string
	// Dir holds the node's files (see Layout).
	Dir string
	// Net is the node's network namespace and address.
	Net hostnet.Node
	// ProviderID is set on the Node by its kubelet.
	ProviderID string
	// Server is the API server URL the node reaches; TLSServerName the
	// name it verifies; CAPEM the cluster CA.
	Server        string
	TLSServerName string
	CAPEM         []byte
	// KubeletKubeconfig is the kubelet's first kubeconfig: a bootstrap
	// kubeconfig when Bootstrap, else its final one.
	KubeletKubeconfig []byte
	Bootstrap         bool
	// ProxyKubeconfig is kube-proxy's kubeconfig; empty: the node asks for
	// kube-proxy's certificate with its kubelet's credential once that
	// joined, and renews it (see Node.ensureProxyCertificate).
	ProxyKubeconfig []byte
	// ClusterCIDR is the cluster's pod range; ClusterDNS its DNS address.
	ClusterCIDR string
	ClusterDNS  string
	// Labels and Taints are registered by the kubelet (labels it may not
	// set are left out; see NodeLabels).
	Labels map[string]string
	Taints []corev1.Taint
	// Reserved and MaxPods shape the node's allocatable.
	Reserved corev1.ResourceList
	MaxPods  int32
	// GPU: the node's instance type has GPUs.
	GPU bool
	// PauseImage is the sandbox image; Registry, when set, the insecure
	// registry (host:port) the node trusts, also by its loopback names
	// (RegistryNames).
	PauseImage string
	Registry   string
	// Images are image archives (docker-archive or OCI tarballs) imported
	// into the node's containerd before the kubelet starts.
	Images []string
	// Version is the Kubernetes version of its kubelet and kube-proxy
	// (empty: the default version).
	Version string
	// KubeletPath and KubeProxyPath are the binaries (of Version).
	KubeletPath   string
	KubeProxyPath string
}

// Node is one running (or stopped) node: its processes run in its own
// network and mount namespaces and cgroup. The zero value is not usable;
// see NewNode.
type Node struct {
	cfg   NodeConfig
	l     Layout
	host  *hostnet.Host
	procs *supervisor.Group
	log   *slog.Logger
	run   run

	mu      sync.Mutex
	state   string // "", Pending, Running, Failed
	message string
	cancel  context.CancelFunc // ends the node's background work
	done    chan struct{}
}

// NewNode returns a Node; nothing runs until Start.
func NewNode(cfg NodeConfig, host *hostnet.Host, procs *supervisor.Group, log *slog.Logger) *Node {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Node{cfg: cfg, l: Layout{Dir: cfg.Dir}, host: host, procs: procs, log: log.With("node", cfg.Name), run: hostnet.ExecRunner}
}

// Layout returns where the node's files are.
func (n *Node) Layout() Layout { return n.l }

// CgroupRoot returns the node's cgroup (the kubelet's cgroupRoot).
func (n *Node) CgroupRoot() string { return CgroupParent + "/" + n.cfg.Net.Netns }

// MountNS returns the file of the node's mount namespace.
func (n *Node) MountNS() string { return mountNSFile(n.cfg.Net.Netns) }

func (n *Node) procName(p string) string { return n.cfg.Net.Netns + "/" + p }

// Prepare writes the node's files and makes its network, mount namespace
// and cgroup. Idempotent.
func (n *Node) Prepare(ctx context.Context) error {
	for _, d := range n.l.Dirs() {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	if err := n.writeConfig(); err != nil {
		return fmt.Errorf("writing the configuration of node %s: %w", n.cfg.Name, err)
	}
	if err := n.host.AddNode(ctx, n.cfg.Net); err != nil {
		return err
	}
	if err := ensureMountNS(ctx, n.run, n.MountNS(), n.l.BindMounts()); err != nil {
		return err
	}
	if err := ensureCgroup(n.CgroupRoot()); err != nil {
		return err
	}
	return nil
}

func (n *Node) writeConfig() error {
	c := n.cfg
	kubelet, err := KubeletConfig(n.l, KubeletSpec{
		NodeIP: c.Net.IP, ProviderID: c.ProviderID, CgroupRoot: n.CgroupRoot(), ClusterDNS: c.ClusterDNS,
		Taints: c.Taints, Reserved: c.Reserved, MaxPods: c.MaxPods, ServerTLSBootstrap: c.Bootstrap, GPU: c.GPU,
	})
	if err != nil {
		return err
	}
	proxy, err := ProxyConfig(n.l, ProxySpec{NodeName: c.Name, NodeIP: c.Net.IP, ClusterCIDR: c.ClusterCIDR})
	if err != nil {
		return err
	}
	proxyKubeconfig, err := n.proxyKubeconfig()
	if err != nil {
		return err
	}
	containerd := ContainerdSpec{PauseImage: c.PauseImage, Registry: c.Registry}
	files := map[string][]byte{
		n.l.ContainerdConfig(): []byte(ContainerdConfig(n.l, containerd)),
		n.l.KubeletConfig():    kubelet,
		n.l.ProxyConfig():      proxy,
		n.l.ProxyKubeconfig():  proxyKubeconfig,
		n.l.CA():               c.CAPEM,
	}
	for name, hosts := range RegistryHosts(containerd) {
		files[filepath.Join(n.l.ContainerdHosts(), name, "hosts.toml")] = []byte(hosts)
	}
	if c.Bootstrap {
		files[n.l.BootstrapKubeconfig()] = c.KubeletKubeconfig
	} else {
		files[n.l.KubeletKubeconfig()] = c.KubeletKubeconfig
	}
	for path, data := range files {
		if err := writeFile(path, data); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// State returns the node's state (Pending, Running or Failed) and why.
func (n *Node) State() (state, message string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state == "Running" {
		for _, p := range []string{ProcContainerd, ProcKubelet, ProcKubeProxy} {
			if proc := n.procs.Get(n.procName(p)); proc != nil && proc.State() == supervisor.Failed {
				return "Failed", fmt.Sprintf("%s keeps exiting (see %s)", p, n.l.Log(p))
			}
		}
	}
	return n.state, n.message
}

// Running reports whether the node's processes are supervised.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cancel != nil
}

func (n *Node) setState(state, msg string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.state, n.message = state, msg
}

// Start starts the node in the background after Prepare: containerd, the
// image imports, the kubelet and kube-proxy, then it waits for the Node's
// pod range to write the CNI configuration and route it. It returns at
// once; State tells how it goes. A started node is not started again.
func (n *Node) Start() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.cancel, n.done = cancel, done
	n.state, n.message = "Pending", "starting containerd"
	go func() {
		defer close(done) // n.done is cleared by Stop
		if err := n.start(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			n.log.Error("node failed to start", "error", err)
			n.setState("Failed", err.Error())
		}
	}()
}

func (n *Node) start(ctx context.Context) error {
	l, c := n.l, n.cfg
	enter := []string{"--net=" + c.Net.NetnsPath(), "--mount=" + n.MountNS(), "--"}
	cd, err := n.procs.Start(ctx, supervisor.Spec{
		Name: n.procName(ProcContainerd), Path: "nsenter",
		Args:    append(enter, "containerd", "--config", l.ContainerdConfig()),
		LogPath: l.Log(ProcContainerd), Ready: n.containerdReady, Env: nodeEnv(), GracePeriod: stopGracePeriod, MaxRestarts: maxRestarts,
	})
	if err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, containerdStartTimeout)
	err = cd.WaitReady(waitCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("containerd of node %s did not start (log %s): %w", c.Name, l.Log(ProcContainerd), err)
	}
	for _, img := range c.Images {
		n.setState("Pending", "importing "+filepath.Base(img))
		if _, err := n.run(ctx, "nsenter", append(enter, "ctr", "--address", ContainerdSocket, "-n", "k8s.io", "images", "import", img)...); err != nil {
			return fmt.Errorf("importing image %s into node %s: %w", img, c.Name, err)
		}
	}
	for _, bin := range []string{c.KubeletPath, c.KubeProxyPath} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("node %s cannot start: %w", c.Name, err)
		}
	}
	n.setState("Pending", "starting the kubelet")
	kubeconfig := l.KubeletKubeconfig()
	args := append(enter, c.KubeletPath,
		"--config="+l.KubeletConfig(),
		"--kubeconfig="+kubeconfig,
		"--root-dir="+KubeletRootDir,
		"--cert-dir="+l.KubeletCertDir(),
		"--hostname-override="+c.Name,
		"--node-ip="+c.Net.IP.String(),
		"--v=1",
	)
	if c.Bootstrap {
		args = append(args, "--bootstrap-kubeconfig="+l.BootstrapKubeconfig())
	}
	if labels, _ := NodeLabels(c.Labels); labels != "" {
		args = append(args, "--node-labels="+labels)
	}
	healthz := "http://" + net.JoinHostPort(c.Net.IP.String(), strconv.Itoa(KubeletHealthzPort)) + "/healthz"
	if _, err := n.procs.Start(ctx, supervisor.Spec{
		Name: n.procName(ProcKubelet), Path: "nsenter", Args: args, LogPath: l.Log(ProcKubelet), Env: nodeEnv(),
		Ready: supervisor.WaitHTTPReady(healthz, nil), GracePeriod: stopGracePeriod, MaxRestarts: maxRestarts,
	}); err != nil {
		return err
	}
	// kube-proxy first (its certificate waits for the Node to register,
	// which it does NotReady), then the pod network: the Node turns Ready
	// once its CNI configuration is written, and the pods it then runs
	// must reach Services from their first connection (a connection made
	// before kube-proxy's rules hangs until its own timeout).
	if err := n.startProxy(ctx, enter); err != nil {
		return err
	}
	n.setState("Running", "")
	return n.setUpPodNetwork(ctx)
}

// startProxy starts kube-proxy once it has its credential (see
// ensureProxyCertificate); enter runs it in the node's namespaces.
func (n *Node) startProxy(ctx context.Context, enter []string) error {
	if err := n.ensureProxyCertificate(ctx); err != nil {
		return err
	}
	l, c := n.l, n.cfg
	_, err := n.procs.Start(ctx, supervisor.Spec{
		Name: n.procName(ProcKubeProxy), Path: "nsenter",
		Args:    append(enter, c.KubeProxyPath, "--config="+l.ProxyConfig(), "--v=1"),
		LogPath: l.Log(ProcKubeProxy), GracePeriod: stopGracePeriod, MaxRestarts: maxRestarts, Env: nodeEnv(),
		// kube-proxy's /healthz answers a JSON document, not "ok".
		Ready: supervisor.WaitHTTPOK("http://"+net.JoinHostPort(c.Net.IP.String(), strconv.Itoa(ProxyHealthzPort))+"/healthz", nil),
	})
	return err
}

// errNoCRI: containerd answers but serves no CRI, as its CRI plugin did not
// load; that containerd never will.
var errNoCRI = errors.New("containerd serves no CRI: its CRI plugin did not load (the log says why; " +
	"a common cause is the inotify instance limit, fs.inotify.max_user_instances)")

// containerdReady asks containerd's CRI runtime service for its version,
// as the kubelet does first. It dials the socket through /proc/self/fd, as
// the node directory may be deeper than a socket path may be long.
func (n *Node) containerdReady(ctx context.Context) error {
	dir, err := os.Open(n.l.ContainerdState())
	if err != nil {
		return err
	}
	defer dir.Close()
	socket := fmt.Sprintf("/proc/self/fd/%d/containerd.sock", dir.Fd())
	conn, err := grpc.NewClient("passthrough:///containerd",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	if status.Code(err) == codes.Unimplemented {
		return errNoCRI
	}
	return err
}

// setUpPodNetwork waits until the Node has its pod range (kube-controller-
// manager allocates it once the kubelet registered), then writes the CNI
// configuration and routes the range to the node.
func (n *Node) setUpPodNetwork(ctx context.Context) error {
	var client kubernetes.Interface
	tick := time.NewTicker(podCIDRPoll)
	defer tick.Stop()
	for {
		if client == nil {
			// The kubelet writes its kubeconfig after TLS bootstrap.
			if cfg, err := clientcmd.BuildConfigFromFlags("", n.l.KubeletKubeconfig()); err == nil {
				cfg.Timeout = 10 * time.Second
				cfg.UserAgent = "fke-local-node"
				client, _ = kubernetes.NewForConfig(cfg)
			}
		}
		if client != nil {
			node, err := client.CoreV1().Nodes().Get(ctx, n.cfg.Name, metav1.GetOptions{})
			switch {
			case err == nil && node.Spec.PodCIDR != "":
				cidr, err := netip.ParsePrefix(node.Spec.PodCIDR)
				if err != nil {
					return fmt.Errorf("node %s: pod range %q: %w", n.cfg.Name, node.Spec.PodCIDR, err)
				}
				return n.SetPodCIDR(ctx, cidr)
			case err != nil && !apierrors.IsNotFound(err):
				n.log.Debug("reading node for its pod range", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// SetPodCIDR writes the node's CNI configuration for cidr and routes cidr
// from the host to the node. Idempotent.
func (n *Node) SetPodCIDR(ctx context.Context, cidr netip.Prefix) error {
	conf, err := CNIConfig(n.l, cidr)
	if err != nil {
		return err
	}
	if err := n.host.RoutePods(ctx, cidr, n.cfg.Net.IP); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(n.l.CNIConf(), "10-fke.conflist"), conf); err != nil {
		return fmt.Errorf("writing the CNI configuration of node %s: %w", n.cfg.Name, err)
	}
	n.log.Info("pod network ready", "podCIDR", cidr)
	return nil
}

// Stop stops the node's processes and background work; containers keep
// running in their shims (a manager restart). Idempotent.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	cancel, done := n.cancel, n.done
	n.cancel, n.done = nil, nil
	n.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	var errs []error
	for _, p := range []string{ProcKubeProxy, ProcKubelet, ProcContainerd} {
		if err := n.procs.Stop(ctx, n.procName(p)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Remove stops the node and removes everything it made: its containers
// and every other process in its cgroup and namespaces, its cgroups, mount
// namespace, network (namespace, veth, routes) and files. Idempotent.
func (n *Node) Remove(ctx context.Context) error {
	if err := n.Stop(ctx); err != nil {
		return err
	}
	killCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var errs []error
	for _, k := range []struct {
		what string
		find func() ([]int, error)
	}{
		{"containers", func() ([]int, error) { return cgroupPids(n.CgroupRoot()) }},
		{"mount namespace", func() ([]int, error) { return nsPids(n.MountNS(), "mnt") }},
		{"network namespace", func() ([]int, error) { return nsPids(n.cfg.Net.NetnsPath(), "net") }},
	} {
		if err := killAll(killCtx, "node "+n.cfg.Name+" "+k.what, k.find); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := removeCgroup(n.CgroupRoot()); err != nil {
		errs = append(errs, err)
	}
	if err := removeMountNS(ctx, n.run, n.MountNS()); err != nil {
		errs = append(errs, err)
	}
	if err := n.host.RemoveNode(ctx, n.cfg.Net); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Nothing is mounted below the directory on the host: the kubelet's
	// mounts lived in the node's mount namespace.
	if mounts, err := MountsUnder(n.l.Dir); err != nil || len(mounts) > 0 {
		return fmt.Errorf("removing node %s: still mounted under %s: %v %v", n.cfg.Name, n.l.Dir, mounts, err)
	}
	if err := os.RemoveAll(n.l.Dir); err != nil {
		return fmt.Errorf("removing the files of node %s: %w", n.cfg.Name, err)
	}
	return nil
}
