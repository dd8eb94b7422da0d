package local

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// Paths inside a node's mount namespace. Each is a bind mount of a
// directory of the node (see Layout), so every node has its own.
const (
	KubeletRootDir     = "/var/lib/kubelet"
	CNIConfDir         = "/etc/cni/net.d"
	CNIStateDir        = "/var/lib/cni"
	ContainerdStateDir = "/run/containerd"
	PodLogsDir         = "/var/log/pods"
	ContainerLogsDir   = "/var/log/containers"
	PodNetnsDir        = "/run/netns"
	// ContainerdSocket is containerd's socket inside the node.
	ContainerdSocket = ContainerdStateDir + "/containerd.sock"
	// CNIBinDir holds the containernetworking plugins (Debian's package).
	CNIBinDir = "/usr/lib/cni"
)

// Ports every node uses on its own address.
const (
	KubeletPort        = 10250
	KubeletHealthzPort = 10248
	ProxyHealthzPort   = 10256
)

// evictionMemory is the kubelet's hard eviction threshold; it is taken off
// the memory reservation so that allocatable equals the instance type.
var evictionMemory = resource.MustParse("100Mi")

// Layout names the files of one node under its directory.
type Layout struct{ Dir string }

func (l Layout) path(p ...string) string { return filepath.Join(append([]string{l.Dir}, p...)...) }

// Record is the node's record (node.json).
func (l Layout) Record() string { return l.path("node.json") }

// ContainerdConfig is containerd's configuration.
func (l Layout) ContainerdConfig() string { return l.path("containerd", "config.toml") }

// ContainerdHosts is containerd's registry host directory (config_path):
// <registry host:port>/hosts.toml for each name of fke's registry.
func (l Layout) ContainerdHosts() string { return l.path("containerd", "certs.d") }

// ContainerdRoot is containerd's root (images, snapshots).
func (l Layout) ContainerdRoot() string { return l.path("containerd", "root") }

// ContainerdState is bound at ContainerdStateDir.
func (l Layout) ContainerdState() string { return l.path("containerd", "state") }

// ContainerdOpt is containerd's opt directory.
func (l Layout) ContainerdOpt() string { return l.path("containerd", "opt") }

// HostContainerdSocket is containerd's socket seen from the host.
func (l Layout) HostContainerdSocket() string {
	return l.path("containerd", "state", "containerd.sock")
}

// KubeletDir is bound at KubeletRootDir.
func (l Layout) KubeletDir() string { return l.path("kubelet") }

// KubeletConfig is the kubelet's configuration file.
func (l Layout) KubeletConfig() string { return l.path("config", "kubelet.yaml") }

// KubeletKubeconfig is the kubelet's kubeconfig (written by TLS bootstrap
// when it starts from a bootstrap kubeconfig).
func (l Layout) KubeletKubeconfig() string { return l.path("config", "kubelet.kubeconfig") }

// BootstrapKubeconfig is the kubelet's bootstrap kubeconfig.
func (l Layout) BootstrapKubeconfig() string { return l.path("config", "bootstrap.kubeconfig") }

// KubeletCertDir holds the kubelet's client and serving certificates.
func (l Layout) KubeletCertDir() string { return l.path("kubelet-pki") }

// CA is the cluster CA (x509 client CA of the kubelet).
func (l Layout) CA() string { return l.path("config", "ca.crt") }

// ProxyConfig is kube-proxy's configuration file.
func (l Layout) ProxyConfig() string { return l.path("config", "kube-proxy.yaml") }

// ProxyKubeconfig is kube-proxy's kubeconfig.
func (l Layout) ProxyKubeconfig() string { return l.path("config", "kube-proxy.kubeconfig") }

// CNIConf is bound at CNIConfDir.
func (l Layout) CNIConf() string { return l.path("cni", "net.d") }

// CNIState is bound at CNIStateDir.
func (l Layout) CNIState() string { return l.path("cni", "state") }

// IPAM is host-local's allocation directory.
func (l Layout) IPAM() string { return l.path("cni", "ipam") }

// PodLogs is bound at PodLogsDir.
func (l Layout) PodLogs() string { return l.path("logs", "pods") }

// ContainerLogs is bound at ContainerLogsDir.
func (l Layout) ContainerLogs() string { return l.path("logs", "containers") }

// PodNetns is bound at PodNetnsDir (the pods' network namespaces).
func (l Layout) PodNetns() string { return l.path("netns") }

// Log returns the log file of a node process.
func (l Layout) Log(process string) string { return l.path("logs", process+".log") }

// Dirs lists the directories a node needs.
func (l Layout) Dirs() []string {
	return []string{
		l.ContainerdRoot(), l.ContainerdState(), l.ContainerdOpt(), l.KubeletDir(), l.KubeletCertDir(),
		l.path("config"), l.CNIConf(), l.CNIState(), l.IPAM(), l.PodLogs(), l.ContainerLogs(), l.PodNetns(),
	}
}

// BindMounts returns the node's bind mounts: node directory -> path in its
// mount namespace.
func (l Layout) BindMounts() [][2]string {
	return [][2]string{
		{l.KubeletDir(), KubeletRootDir},
		{l.CNIConf(), CNIConfDir},
		{l.CNIState(), CNIStateDir},
		{l.ContainerdState(), ContainerdStateDir},
		{l.PodLogs(), PodLogsDir},
		{l.ContainerLogs(), ContainerLogsDir},
		{l.PodNetns(), PodNetnsDir},
	}
}

// ContainerdSpec is what containerd's configuration depends on.
type ContainerdSpec struct {
	PauseImage string
	// Registry, when set, is host:port of fke's insecure (HTTP) registry as
	// the node reaches it: its address on the node bridge, which the host
	// forwards to the registry's loopback port (see RegistryNames).
	Registry string
}

// RegistryNames returns the names a node pulls fke's registry by, all sent
// to its bridge address reg (host:port): reg itself, and the loopback
// names of the same port, which the host uses and `fke image push` and
// `fke image list` print (inside a node loopback is the node's own, where
// no registry listens). So one image name works on the host and in pods,
// as kind's local registry does with containerd's hosts.toml.
func RegistryNames(reg string) []string {
	if reg == "" {
		return nil
	}
	names := []string{reg}
	if _, port, err := net.SplitHostPort(reg); err == nil && port != "" {
		names = append(names, net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("localhost", port))
	}
	return names
}

// RegistryHosts renders containerd's hosts.toml of each of the registry's
// names (RegistryNames), by the name's directory under
// Layout.ContainerdHosts: pulls go to the bridge address over plain HTTP.
// Nil without a registry.
func RegistryHosts(s ContainerdSpec) map[string]string {
	names := RegistryNames(s.Registry)
	if len(names) == 0 {
		return nil
	}
	hosts := make(map[string]string, len(names))
	for _, name := range names {
		// containerd 1.6 refuses a hosts.toml without a host table.
		hosts[name] = fmt.Sprintf(`# fke's registry: images named %s/... are pulled from its address on the
# node bridge, over plain HTTP.
server = %[2]q

[host.%[2]q]
  capabilities = ["pull", "resolve"]
`, name, "http://"+s.Registry)
	}
	return hosts
}

// ContainerdConfig renders containerd's configuration (version 2).
// restrict_oom_score_adj: runc cannot lower oom_score_adj below its
// parent's on these machines.
func ContainerdConfig(l Layout, s ContainerdSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, `version = 2
root = %q
state = %q
oom_score = 0

[grpc]
  address = %q

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %q
  [plugins."io.containerd.grpc.v1.cri"]
    restrict_oom_score_adj = true
    sandbox_image = %q
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %q
      conf_dir = %q
`, l.ContainerdRoot(), ContainerdStateDir, ContainerdSocket, l.ContainerdOpt(), s.PauseImage, CNIBinDir, CNIConfDir)
	if s.Registry != "" {
		// The registry's names are mapped in hosts.toml files
		// (RegistryHosts); containerd refuses mirrors beside config_path.
		fmt.Fprintf(&b, `    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = %q
`, l.ContainerdHosts())
	}
	return b.String()
}

// KubeletSpec is what the kubelet's configuration depends on.
type KubeletSpec struct {
	NodeIP     netip.Addr
	ProviderID string
	CgroupRoot string
	ClusterDNS string
	Taints     []corev1.Taint
	// Reserved is kept from pods (systemReserved) so that the node's
	// allocatable is the instance type's shape (see Reservation).
	Reserved corev1.ResourceList
	MaxPods  int32
	// ServerTLSBootstrap asks for a serving certificate signed by the
	// cluster CA through a CSR instead of a self-signed one.
	ServerTLSBootstrap bool
	// GPU: the node has GPUs, whose health its status follows closely.
	GPU bool
}

// KubeletConfig renders the KubeletConfiguration.
func KubeletConfig(l Layout, s KubeletSpec) ([]byte, error) {
	reserved := map[string]string{}
	for name, q := range s.Reserved {
		if !q.IsZero() {
			reserved[string(name)] = q.String()
		}
	}
	cfg := map[string]any{
		"apiVersion":         "kubelet.config.k8s.io/v1beta1",
		"kind":               "KubeletConfiguration",
		"address":            s.NodeIP.String(),
		"port":               KubeletPort,
		"readOnlyPort":       0,
		"healthzBindAddress": s.NodeIP.String(),
		"healthzPort":        KubeletHealthzPort,
		"providerID":         s.ProviderID,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": l.CA()},
		},
		"authorization":            map[string]any{"mode": "Webhook"},
		"containerRuntimeEndpoint": "unix://" + ContainerdSocket,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               s.CgroupRoot,
		"cgroupsPerQOS":            true,
		"enforceNodeAllocatable":   []string{"pods"},
		"failCgroupV1":             false,
		"failSwapOn":               false,
		"clusterDomain":            "cluster.local",
		"resolvConf":               "/etc/resolv.conf",
		"volumePluginDir":          KubeletRootDir + "/volume-plugins",
		"serverTLSBootstrap":       s.ServerTLSBootstrap,
		"rotateCertificates":       true,
		"maxPods":                  s.MaxPods,
		"systemReserved":           reserved,
		"evictionHard": map[string]string{
			"memory.available":   evictionMemory.String(),
			"nodefs.available":   "1%",
			"nodefs.inodesFree":  "1%",
			"imagefs.available":  "1%",
			"imagefs.inodesFree": "1%",
		},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"registerWithTaints":          s.Taints,
		// Status is sent only when it changed, or every minute. A GPU
		// node's is computed every 500 ms (a GPU gone unhealthy leaves
		// allocatable within a second); any other node's every 2 s (a
		// kubelet back from a stall reports Ready within about that), a
		// quarter of the cost: each computation reads the Node from the
		// API server, which a management cluster's nodes pay for with
		// their tenants' CPU (bench/README). A new kubelet reports Ready
		// as soon as it is, whatever the period (it polls its first
		// status every 100 ms).
		"nodeStatusUpdateFrequency": statusUpdateFrequency(s.GPU),
		"nodeStatusReportFrequency": "1m",
		"shutdownGracePeriod":       "0s",
	}
	if s.ClusterDNS != "" {
		cfg["clusterDNS"] = []string{s.ClusterDNS}
	}
	return yaml.Marshal(cfg)
}

// statusUpdateFrequency is how often a kubelet computes its node's status.
func statusUpdateFrequency(gpu bool) string {
	if gpu {
		return "500ms"
	}
	return "2s"
}

// Reservation returns what the kubelet keeps from pods on a host of
// hostCPU and hostMemory so that allocatable is cpu and memory, or an error
// when the shape does not fit the host.
func Reservation(hostCPU, hostMemory, cpu, memory resource.Quantity) (corev1.ResourceList, error) {
	if cpu.Cmp(hostCPU) > 0 || memory.Cmp(hostMemory) > 0 {
		return nil, fmt.Errorf("%s CPU and %s memory do not fit this host (%s CPU, %s memory)", cpu.String(), memory.String(), hostCPU.String(), hostMemory.String())
	}
	resCPU := hostCPU.DeepCopy()
	resCPU.Sub(cpu)
	resMem := hostMemory.DeepCopy()
	resMem.Sub(memory)
	resMem.Sub(evictionMemory)
	if resMem.Sign() < 0 {
		resMem = resource.MustParse("0")
	}
	return corev1.ResourceList{corev1.ResourceCPU: resCPU, corev1.ResourceMemory: resMem}, nil
}

// kubeletLabelNamespaces may be set by a kubelet on its own Node
// (NodeRestriction): labels in kubernetes.io or k8s.io namespaces are
// refused except these.
var kubeletLabelNamespaces = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}

var kubeletLabels = []string{
	"kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os",
	"beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
	"failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
	"topology.kubernetes.io/region", "topology.kubernetes.io/zone",
}

// NodeLabels splits labels into those the kubelet sets (--node-labels) and
// those NodeRestriction forbids it to set (node-role.kubernetes.io/...):
// the provider applies the latter with its own credentials. The kubelet's
// own labels (hostname, os, arch) are left out.
func NodeLabels(labels map[string]string) (kubelet string, others map[string]string) {
	var parts []string
	for k, v := range labels {
		switch k {
		case corev1.LabelHostname, corev1.LabelOSStable, corev1.LabelArchStable:
			continue
		}
		if kubeletMaySet(k) {
			parts = append(parts, k+"="+v)
			continue
		}
		if others == nil {
			others = map[string]string{}
		}
		others[k] = v
	}
	sort.Strings(parts)
	return strings.Join(parts, ","), others
}

func kubeletMaySet(key string) bool {
	if slices.Contains(kubeletLabels, key) {
		return true
	}
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	for _, ns := range kubeletLabelNamespaces {
		if prefix == ns || strings.HasSuffix(prefix, "."+ns) {
			return true
		}
	}
	return !(prefix == "kubernetes.io" || strings.HasSuffix(prefix, ".kubernetes.io") || prefix == "k8s.io" || strings.HasSuffix(prefix, ".k8s.io"))
}

// ProxySpec is what kube-proxy's configuration depends on.
type ProxySpec struct {
	NodeName    string
	NodeIP      netip.Addr
	ClusterCIDR string
}

// ProxyConfig renders the KubeProxyConfiguration: iptables mode in the
// node's network namespace, conntrack left as the kernel has it (its
// sysctls are not writable in a network namespace).
func ProxyConfig(l Layout, s ProxySpec) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"mode":               "iptables",
		"clientConnection":   map[string]any{"kubeconfig": l.ProxyKubeconfig()},
		"hostnameOverride":   s.NodeName,
		"bindAddress":        s.NodeIP.String(),
		"healthzBindAddress": fmt.Sprintf("%s:%d", s.NodeIP, ProxyHealthzPort),
		"metricsBindAddress": "127.0.0.1:10249",
		"clusterCIDR":        s.ClusterCIDR,
		"conntrack": map[string]any{
			"maxPerCore":            0,
			"min":                   0,
			"tcpEstablishedTimeout": "0s",
			"tcpCloseWaitTimeout":   "0s",
		},
	}
	return yaml.Marshal(cfg)
}

// CNIConfig renders the node's CNI network: a bridge (cni0) with host-local
// addresses from the node's pod range and portmap for hostPorts (containerd
// adds the loopback plugin to every pod itself).
// Pod traffic is routed, never masqueraded: other nodes and the host reach
// pods by their own addresses.
func CNIConfig(l Layout, podCIDR netip.Prefix) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "fke",
		"plugins": []any{
			map[string]any{
				"type":         "bridge",
				"bridge":       "cni0",
				"isGateway":    true,
				"ipMasq":       false,
				"hairpinMode":  true,
				"forceAddress": false,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": l.IPAM(),
					"ranges":  [][]map[string]string{{{"subnet": podCIDR.Masked().String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}
