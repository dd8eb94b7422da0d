// Package local makes real worker nodes on this machine, like kind nodes
// without Docker: each node is a containerd, a kubelet and a kube-proxy in
// its own network namespace (a veth on fke's host bridge, see hostnet),
// mount namespace (its /var/lib/kubelet, /etc/cni/net.d, /run/containerd,
// ... are directories of the node) and cgroup, supervised as children of
// the manager. Nodes join their cluster through the API server address
// hostnet exposes on the bridge, with the credentials the cluster's Join
// gives. Deleting a node kills its containers and removes everything it
// made. It needs root; see Check.
package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/netrange"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/supervisor"
)

// ProviderIDPrefix starts every provider ID: local://<namespace>/<cluster>/<node>.
const ProviderIDPrefix = "local://"

// DefaultPauseImage is the sandbox image when Options.PauseImage and
// Options.Registry are empty.
const DefaultPauseImage = "fke.local/pause:1"

// Options configure a Provider.
type Options struct {
	// DataDir is fke's data directory; nodes live under DataDir/nodes.
	DataDir string
	// Binaries finds the kubelet and kube-proxy.
	Binaries binaries.Finder
	// Logger receives the provider's logs; nil discards them.
	Logger *slog.Logger
	// Host manages the host network (hostnet.New when nil).
	Host *hostnet.Host
	// PauseImage is the nodes' sandbox image. When empty: fke's pause image
	// in Registry (image.Pause), or DefaultPauseImage without a registry.
	PauseImage string
	// Registry is host:port of the registry nodes pull from (its port is
	// exposed on the gateway); empty when there is none.
	Registry string
	// Images are image archives imported into every node's containerd
	// when it starts (images the registry does not serve yet).
	Images []string
	// HostCPU and HostMemory are this machine's shape (detected when zero).
	HostCPU    resource.Quantity
	HostMemory resource.Quantity
	// HostGPUDriver says whether this host's NVIDIA driver runs (see
	// HostHasGPUDriver): GPU nodes then use it, else simulated GPUs.
	HostGPUDriver bool
}

// Provider is the local node provider. Its methods are safe for concurrent use.
type Provider struct {
	opts  Options
	log   *slog.Logger
	host  *hostnet.Host
	procs *supervisor.Group

	mu    sync.Mutex
	nodes map[string]*Node // by provider ID, nodes this process supervises
}

var _ nodeprovider.Provider = (*Provider)(nil)

// New returns a Provider. It starts nothing; nodes recorded under the data
// directory are started again by Get (after a manager restart).
func New(opts Options) (*Provider, error) {
	if opts.DataDir == "" {
		return nil, errors.New("local provider: no data directory")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	log := opts.Logger.With("provider", string(fkev1.ProviderLocal))
	if opts.Host == nil {
		opts.Host = hostnet.New(nil, log)
	}
	opts.PauseImage = pauseImage(opts.PauseImage, opts.Registry)
	if opts.HostCPU.IsZero() {
		opts.HostCPU = *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI)
	}
	if opts.HostMemory.IsZero() {
		mem, err := hostMemory()
		if err != nil {
			return nil, err
		}
		opts.HostMemory = mem
	}
	return &Provider{opts: opts, log: log, host: opts.Host, procs: supervisor.NewGroup(log), nodes: map[string]*Node{}}, nil
}

// pauseImage is the sandbox image nodes use: the configured one, else
// fke's pause image in the registry nodes pull from.
func pauseImage(configured, registry string) string {
	switch {
	case configured != "":
		return configured
	case registry != "":
		return image.Pause.Ref(registry)
	default:
		return DefaultPauseImage
	}
}

// hostMemory reads MemTotal, the memory capacity the kubelet reports.
func hostMemory() (resource.Quantity, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("reading host memory: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				break
			}
			return *resource.NewQuantity(kb*1024, resource.BinarySI), nil
		}
	}
	return resource.Quantity{}, errors.New("reading host memory: no MemTotal in /proc/meminfo")
}

// Name returns fkev1.ProviderLocal.
func (p *Provider) Name() fkev1.ProviderName { return fkev1.ProviderLocal }

// ProviderID returns the provider ID of node nodeName of the cluster with key clusterKey.
func ProviderID(clusterKey, nodeName string) string {
	return ProviderIDPrefix + clusterKey + "/" + nodeName
}

// parseProviderID splits local://<namespace>/<cluster>/<node>.
func parseProviderID(id string) (clusterKey, nodeName string, ok bool) {
	rest, found := strings.CutPrefix(id, ProviderIDPrefix)
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	for _, p := range parts {
		if p == "." || p == ".." {
			return "", "", false
		}
	}
	return parts[0] + "/" + parts[1], parts[2], true
}

// record is a node's node.json: what it was made with.
type record struct {
	ClusterKey  string            `json:"clusterKey"`
	MachineName string            `json:"machineName"`
	PodCIDR     string            `json:"clusterPodCIDR"`
	APIPort     int               `json:"apiPort"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// RealGPUs: the node was given this host's GPUs (one node at a time).
	RealGPUs bool       `json:"realGPUs,omitempty"`
	Config   NodeConfig `json:"config"`
}

func (p *Provider) nodesDir() string { return filepath.Join(p.opts.DataDir, "nodes") }

func (p *Provider) nodeDir(clusterKey, nodeName string) string {
	return filepath.Join(p.nodesDir(), filepath.FromSlash(clusterKey), nodeName)
}

// records reads every node record under the data directory.
func (p *Provider) records() ([]record, error) {
	paths, err := filepath.Glob(filepath.Join(p.nodesDir(), "*", "*", "*", "node.json"))
	if err != nil {
		return nil, err
	}
	var out []record
	for _, path := range paths {
		r, err := readRecord(path)
		if err != nil {
			p.log.Warn("skipping unreadable node record", "path", path, "error", err)
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

func readRecord(path string) (record, error) {
	var r record
	data, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("reading %s: %w", path, err)
	}
	return r, nil
}

func (r record) instance() nodeprovider.Instance {
	return nodeprovider.Instance{ProviderID: r.Config.ProviderID, NodeName: r.Config.Name, MachineName: r.MachineName}
}

// Create makes the node of spec in cluster and starts it in the background:
// it returns once the node's network, mount namespace and files exist, with
// the instance Pending; Get tells when it runs or why it failed.
// Idempotent per machine.
func (p *Provider) Create(ctx context.Context, cluster nodeprovider.Cluster, spec nodeprovider.NodeSpec) (nodeprovider.Instance, error) {
	if spec.MachineName == "" || spec.Template == nil || spec.Template.Name == "" || spec.InstanceType == nil {
		return nodeprovider.Instance{}, errors.New("creating local node: no machine name, node template or instance type")
	}
	if cluster.Join == nil || cluster.Join.Credentials == nil {
		return nodeprovider.Instance{}, fmt.Errorf("creating local node for machine %s: cluster %s gives no way to join it", spec.MachineName, cluster.Key)
	}
	reserved, note, err := nodeShape(p.opts.HostCPU, p.opts.HostMemory, spec.InstanceType)
	if err == nil && spec.InstanceType.Spec.GPU != nil {
		_, err = GPUBackend(spec.InstanceType.Spec.GPU, p.opts.HostGPUDriver)
	}
	if err != nil {
		return nodeprovider.Instance{}, &nodeprovider.InsufficientCapacityError{InstanceType: spec.InstanceType.Name, Reason: err.Error()}
	}
	if note != "" {
		p.log.Info("node shrunk to this host", "machine", spec.MachineName, "note", note)
	}
	nodeName := spec.Template.Name

	p.mu.Lock()
	defer p.mu.Unlock()
	dir := p.nodeDir(cluster.Key, nodeName)
	if r, err := readRecord(Layout{Dir: dir}.Record()); err == nil {
		if r.MachineName != spec.MachineName {
			return nodeprovider.Instance{}, fmt.Errorf("creating local node %s for machine %s: it exists for machine %s", nodeName, spec.MachineName, r.MachineName)
		}
		return p.instanceLocked(ctx, cluster, r)
	}
	all, err := p.records()
	if err != nil {
		return nodeprovider.Instance{}, err
	}
	if err := checkPodCIDR(cluster, all); err != nil {
		return nodeprovider.Instance{}, err
	}
	realGPUs := spec.InstanceType.Spec.GPU != nil && p.opts.HostGPUDriver
	if realGPUs {
		// Every node's agent would see all of the host's GPUs: they go to
		// one node, or two nodes would hand out the same devices.
		for _, r := range all {
			if r.RealGPUs {
				return nodeprovider.Instance{}, &nodeprovider.InsufficientCapacityError{InstanceType: spec.InstanceType.Name,
					Reason: fmt.Sprintf("this host's GPUs belong to local node %s of cluster %s", r.Config.Name, r.ClusterKey)}
			}
		}
	}
	if err := p.ensureClusterDNS(ctx, cluster); err != nil {
		return nodeprovider.Instance{}, fmt.Errorf("creating local node for machine %s: %w", spec.MachineName, err)
	}
	used, err := p.host.UsedIPs(ctx)
	if err != nil {
		return nodeprovider.Instance{}, err
	}
	for _, r := range all {
		used = append(used, r.Config.Net.IP)
	}
	ip, err := hostnet.AllocateIP(used)
	if err != nil {
		return nodeprovider.Instance{}, err
	}
	cfg, apiPort, err := p.nodeConfig(ctx, cluster, spec, dir, ip, reserved)
	if err != nil {
		return nodeprovider.Instance{}, fmt.Errorf("creating local node for machine %s: %w", spec.MachineName, err)
	}
	r := record{ClusterKey: cluster.Key, MachineName: spec.MachineName, PodCIDR: cluster.PodCIDR, APIPort: apiPort, Annotations: spec.Template.Annotations, RealGPUs: realGPUs, Config: cfg}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nodeprovider.Instance{}, err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nodeprovider.Instance{}, err
	}
	if err := writeFile(Layout{Dir: dir}.Record(), data); err != nil {
		return nodeprovider.Instance{}, fmt.Errorf("recording node %s: %w", nodeName, err)
	}
	p.log.Info("creating local node", "cluster", cluster.Key, "node", nodeName, "ip", ip)
	return p.instanceLocked(ctx, cluster, r)
}

// ensureClusterDNS installs CoreDNS (fke's image in the registry) in a
// cluster that gets a new local node; server-side apply makes it idempotent.
// Without a registry or an admin config of the cluster (a host joined with
// `fke node join`) it does nothing.
func (p *Provider) ensureClusterDNS(ctx context.Context, cluster nodeprovider.Cluster) error {
	if p.opts.Registry == "" || cluster.Config == nil {
		return nil
	}
	c, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		return fmt.Errorf("cluster %s: client: %w", cluster.Key, err)
	}
	return addons.EnsureCoreDNS(ctx, c, addons.DNSOptions{Image: image.CoreDNS.Ref(p.opts.Registry), ServiceCIDR: cluster.ServiceCIDR})
}

// checkPodCIDR refuses a cluster whose pod range the host cannot route to
// its local nodes: one overlapping the node addresses or the pod range of
// another cluster with local nodes (netrange.CheckLocalPodRange, the check
// the admission webhook makes when a local pool is created).
func checkPodCIDR(cluster nodeprovider.Cluster, all []record) error {
	mine, err := netip.ParsePrefix(cluster.PodCIDR)
	if err != nil {
		return fmt.Errorf("cluster %s has no valid pod range (%q): set spec.network.podCIDR", cluster.Key, cluster.PodCIDR)
	}
	var others []netrange.LocalCluster
	for _, r := range all {
		if r.ClusterKey == cluster.Key || (cluster.Join != nil && r.Config.Server == cluster.Join.Server) {
			continue // the same cluster (a node joined with fke node join has its own key)
		}
		if p, err := netip.ParsePrefix(r.PodCIDR); err == nil {
			others = append(others, netrange.LocalCluster{Key: r.ClusterKey, PodCIDR: p})
		}
	}
	return netrange.CheckLocalPodRange(netrange.LocalCluster{Key: cluster.Key, PodCIDR: mine}, others)
}

// nodeConfig computes the configuration of a new node.
func (p *Provider) nodeConfig(ctx context.Context, cluster nodeprovider.Cluster, spec nodeprovider.NodeSpec, dir string, ip netip.Addr, reserved corev1.ResourceList) (NodeConfig, int, error) {
	join := cluster.Join
	u, err := url.Parse(join.Server)
	if err != nil || u.Port() == "" {
		return NodeConfig{}, 0, fmt.Errorf("cluster %s: node endpoint %q has no port", cluster.Key, join.Server)
	}
	apiPort, _ := strconv.Atoi(u.Port())
	kubelet, err := p.opts.Binaries.PathFor(spec.Version, binaries.Kubelet)
	if err != nil {
		return NodeConfig{}, 0, err
	}
	proxy, err := p.opts.Binaries.PathFor(spec.Version, binaries.KubeProxy)
	if err != nil {
		return NodeConfig{}, 0, err
	}
	kubeconfig, bootstrap, err := join.Credentials.KubeletKubeconfig(ctx, spec.Template.Labels[fkev1.LabelNodePool], spec.Template.Name)
	if err != nil {
		return NodeConfig{}, 0, fmt.Errorf("kubelet credentials: %w", err)
	}
	proxyKubeconfig, err := join.Credentials.ProxyKubeconfig(ctx)
	if err != nil {
		return NodeConfig{}, 0, fmt.Errorf("kube-proxy credentials: %w", err)
	}
	maxPods := spec.InstanceType.Spec.Pods
	if maxPods == 0 {
		maxPods = 110
	}
	return NodeConfig{
		Name: spec.Template.Name, Dir: dir,
		Net:        hostnet.Node{Netns: hostnet.NetnsName(cluster.Key, spec.Template.Name), IP: ip},
		ProviderID: ProviderID(cluster.Key, spec.Template.Name),
		Server:     join.Server, TLSServerName: join.TLSServerName, CAPEM: join.CAPEM,
		KubeletKubeconfig: kubeconfig, Bootstrap: bootstrap, ProxyKubeconfig: proxyKubeconfig,
		ClusterCIDR: cluster.PodCIDR, ClusterDNS: join.DNSIP,
		Labels: spec.Template.Labels, Taints: spec.Template.Spec.Taints,
		Reserved: reserved, MaxPods: maxPods, GPU: spec.InstanceType.Spec.GPU != nil,
		PauseImage: p.opts.PauseImage, Registry: p.opts.Registry, Images: p.opts.Images,
		Version: spec.Version, KubeletPath: kubelet, KubeProxyPath: proxy,
	}, apiPort, nil
}

// instanceLocked returns the instance of r, starting its node when this
// process does not run it (a new node, or after a manager restart).
func (p *Provider) instanceLocked(ctx context.Context, cluster nodeprovider.Cluster, r record) (nodeprovider.Instance, error) {
	in := r.instance()
	n := p.nodes[in.ProviderID]
	if n == nil || !n.Running() {
		if err := p.host.EnsureBridge(ctx); err != nil {
			return in, err
		}
		if changed, err := RaiseLimits("/proc/sys", HostLimits); err != nil {
			return in, err
		} else if len(changed) > 0 {
			p.log.Info("raised host limits for local nodes", "changed", changed)
		}
		if err := p.host.Expose(ctx, r.APIPort); err != nil {
			return in, err
		}
		if reg := p.opts.Registry; reg != "" {
			if _, port, ok := strings.Cut(reg, ":"); ok {
				if pn, err := strconv.Atoi(port); err == nil {
					if err := p.host.Expose(ctx, pn); err != nil {
						return in, err
					}
				}
			}
		}
		// Refresh what may have moved since the record was written.
		cfg := r.Config
		if path, err := p.opts.Binaries.PathFor(cfg.Version, binaries.Kubelet); err == nil {
			cfg.KubeletPath = path
		}
		if path, err := p.opts.Binaries.PathFor(cfg.Version, binaries.KubeProxy); err == nil {
			cfg.KubeProxyPath = path
		}
		n = NewNode(cfg, p.host, p.procs, p.log)
		if err := n.Prepare(ctx); err != nil {
			return in, fmt.Errorf("preparing node %s: %w", cfg.Name, err)
		}
		n.Start()
		p.nodes[in.ProviderID] = n
		if cluster.Config != nil {
			go p.annotate(cluster.Config, r)
		}
	}
	state, msg := n.State()
	in.State, in.Message = nodeprovider.InstanceState(state), msg
	return in, nil
}

// annotate waits until the node registered, then puts the template's
// annotations (the machine's) and the labels the kubelet may not set on
// it with the cluster's admin credentials. It gives up after 10 minutes.
func (p *Provider) annotate(cfg *rest.Config, r record) {
	_, extra := NodeLabels(r.Config.Labels)
	if len(r.Annotations) == 0 && len(extra) == 0 {
		return
	}
	c := rest.CopyConfig(cfg)
	c.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(c)
	if err != nil {
		p.log.Error("annotating node", "node", r.Config.Name, "error", err)
		return
	}
	meta := map[string]any{}
	if len(r.Annotations) > 0 {
		meta["annotations"] = r.Annotations
	}
	if len(extra) > 0 {
		meta["labels"] = extra // a null map would delete every label
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for {
		_, err := client.CoreV1().Nodes().Patch(ctx, r.Config.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsNotFound(err) {
			p.log.Debug("annotating node", "node", r.Config.Name, "error", err)
		}
		select {
		case <-ctx.Done():
			p.log.Warn("node did not register in time to be annotated", "node", r.Config.Name)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// lookup returns the record of providerID if it is a node of cluster.
func (p *Provider) lookup(cluster nodeprovider.Cluster, providerID string) (record, error) {
	key, node, ok := parseProviderID(providerID)
	if !ok || key != cluster.Key {
		return record{}, &nodeprovider.NotFoundError{ProviderID: providerID}
	}
	r, err := readRecord(Layout{Dir: p.nodeDir(key, node)}.Record())
	if errors.Is(err, os.ErrNotExist) {
		return record{}, &nodeprovider.NotFoundError{ProviderID: providerID}
	}
	if err != nil {
		return record{}, err
	}
	return r, nil
}

// Get returns the instance of providerID with its state, starting its
// node again when this process does not run it.
func (p *Provider) Get(ctx context.Context, cluster nodeprovider.Cluster, providerID string) (nodeprovider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, err := p.lookup(cluster, providerID)
	if err != nil {
		return nodeprovider.Instance{}, fmt.Errorf("getting instance %s: %w", providerID, err)
	}
	return p.instanceLocked(ctx, cluster, r)
}

// List returns the instances of cluster's nodes.
func (p *Provider) List(_ context.Context, cluster nodeprovider.Cluster) ([]nodeprovider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	all, err := p.records()
	if err != nil {
		return nil, err
	}
	var out []nodeprovider.Instance
	for _, r := range all {
		if r.ClusterKey != cluster.Key {
			continue
		}
		in := r.instance()
		if n := p.nodes[in.ProviderID]; n != nil {
			state, msg := n.State()
			in.State, in.Message = nodeprovider.InstanceState(state), msg
		}
		out = append(out, in)
	}
	return out, nil
}

// Delete removes the node: its processes, containers, namespaces, cgroups,
// network and files, then its Node object.
func (p *Provider) Delete(ctx context.Context, cluster nodeprovider.Cluster, providerID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, err := p.lookup(cluster, providerID)
	if err != nil {
		return fmt.Errorf("deleting instance %s: %w", providerID, err)
	}
	if err := p.removeLocked(ctx, r); err != nil {
		return err
	}
	if cluster.Config != nil {
		client, err := kubernetes.NewForConfig(cluster.Config)
		if err != nil {
			return err
		}
		err = client.CoreV1().Nodes().Delete(ctx, r.Config.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting node %s of cluster %s: %w", r.Config.Name, cluster.Key, err)
		}
	}
	return p.tidyLocked(ctx, r.APIPort)
}

func (p *Provider) removeLocked(ctx context.Context, r record) error {
	n := p.nodes[r.Config.ProviderID]
	if n == nil {
		n = NewNode(r.Config, p.host, p.procs, p.log)
	}
	if err := n.Remove(ctx); err != nil {
		return fmt.Errorf("removing node %s: %w", r.Config.Name, err)
	}
	delete(p.nodes, r.Config.ProviderID)
	p.log.Info("local node removed", "cluster", r.ClusterKey, "node", r.Config.Name)
	return nil
}

// tidyLocked unexposes the API ports (of nodes just removed) that no node
// left uses, and removes the bridge, chains and namespace directory once no
// node is left.
func (p *Provider) tidyLocked(ctx context.Context, ports ...int) error {
	all, err := p.records()
	if err != nil {
		return err
	}
	if len(all) == 0 {
		return p.removeHostLocked(ctx)
	}
	var errs []error
	for _, port := range ports {
		if port == 0 || slices.ContainsFunc(all, func(r record) bool { return r.APIPort == port }) {
			continue
		}
		if err := p.host.Unexpose(ctx, port); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeHostLocked removes the bridge, fke's chains, the mount namespace
// directory and the parent cgroup, unless nodes of another fke (another
// data directory, fke node join) still use them.
func (p *Provider) removeHostLocked(ctx context.Context) error {
	if used, err := p.host.UsedIPs(ctx); err != nil || len(used) > 0 {
		return err
	}
	var errs []error
	if err := p.host.RemoveBridge(ctx); err != nil {
		errs = append(errs, err)
	}
	if isMountPoint(MountNSDir, "") {
		if _, err := hostnet.ExecRunner(ctx, "umount", MountNSDir); err != nil {
			errs = append(errs, err)
		}
	}
	if !isMountPoint(MountNSDir, "") {
		if err := os.RemoveAll(filepath.Dir(MountNSDir)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeCgroup(CgroupParent); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// HostInstanceType is the shape of this whole host (for a node joined with
// `fke node join`: nothing is reserved).
func (p *Provider) HostInstanceType() (*fkev1.InstanceType, error) {
	return &fkev1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "host"},
		Spec:       fkev1.InstanceTypeSpec{CPU: p.opts.HostCPU.DeepCopy(), Memory: p.opts.HostMemory.DeepCopy()},
	}, nil
}

// InstanceTypes returns the types of the catalog this host can make: the
// CPU types that fit it, and the GPU types its driver (or, without one, a
// simulated machine) provides, shrunk to the host when larger.
func (p *Provider) InstanceTypes(_ context.Context, catalog []fkev1.InstanceType) ([]fkev1.InstanceType, error) {
	var out []fkev1.InstanceType
	for i := range catalog {
		it := &catalog[i]
		if it.Spec.GPU != nil {
			if _, err := GPUBackend(it.Spec.GPU, p.opts.HostGPUDriver); err != nil {
				continue
			}
		}
		if _, _, err := nodeShape(p.opts.HostCPU, p.opts.HostMemory, it); err == nil {
			out = append(out, *it.DeepCopy())
		}
	}
	return out, nil
}

// Release removes every node of cluster (it is being deleted).
func (p *Provider) Release(ctx context.Context, cluster nodeprovider.Cluster) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	all, err := p.records()
	if err != nil {
		return err
	}
	var errs []error
	var ports []int
	for _, r := range all {
		if r.ClusterKey != cluster.Key {
			continue
		}
		ports = append(ports, r.APIPort)
		if err := p.removeLocked(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	if err := p.tidyLocked(ctx, ports...); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// StopAll stops every node's processes (at manager shutdown): containers
// keep running in their shims and the nodes start again on the next Get.
func (p *Provider) StopAll(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for id, n := range p.nodes {
		if err := n.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
		delete(p.nodes, id)
	}
	return errors.Join(errs...)
}

// RemoveAll removes every node recorded under the data directory and the
// host network (fke down). It needs no API server.
func (p *Provider) RemoveAll(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	all, err := p.records()
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range all {
		if err := p.removeLocked(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	if err := p.removeHostLocked(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Node returns the running node of providerID, or nil (tests use it to
// reach a node's processes).
func (p *Provider) Node(providerID string) *Node {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nodes[providerID]
}

// Procs returns the supervisor group of the nodes' processes.
func (p *Provider) Procs() *supervisor.Group { return p.procs }
