package local

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	proxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"fke.dev/fke/internal/nodeprovider"
)

func TestReservation(t *testing.T) {
	q := resource.MustParse
	res, err := Reservation(q("2"), q("23Gi"), q("2"), q("8Gi"))
	if err != nil {
		t.Fatal(err)
	}
	mem := res["memory"]
	want := q("15Gi")
	want.Sub(evictionMemory)
	if cpu := res["cpu"]; !cpu.IsZero() || mem.Cmp(want) != 0 {
		t.Errorf("Reservation = cpu %s memory %s, want 0 and %s", res.Cpu(), mem.String(), want.String())
	}
	if _, err := Reservation(q("2"), q("23Gi"), q("8"), q("32Gi")); err == nil || !strings.Contains(err.Error(), "do not fit this host") {
		t.Errorf("Reservation of a too large shape: %v", err)
	}
}

func TestNodeLabels(t *testing.T) {
	kubelet, others := NodeLabels(map[string]string{
		"kubernetes.io/hostname":           "n1",
		"node.kubernetes.io/instance-type": "cpu-small",
		"topology.kubernetes.io/zone":      "local-a",
		"fke.dev/nodepool":                 "cpu",
		"node-role.kubernetes.io/worker":   "",
		"team":                             "ml",
	})
	if kubelet != "fke.dev/nodepool=cpu,node.kubernetes.io/instance-type=cpu-small,team=ml,topology.kubernetes.io/zone=local-a" {
		t.Errorf("kubelet labels %q", kubelet)
	}
	if len(others) != 1 || others["node-role.kubernetes.io/worker"] != "" {
		t.Errorf("labels left to the provider %v", others)
	}
}

func TestCNIConfigRoutesWithoutMasquerade(t *testing.T) {
	data, err := CNIConfig(Layout{Dir: "/n"}, netip.MustParsePrefix("10.112.3.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if strings.Contains(s, "promiscMode") {
		t.Errorf("the bridge plugin refuses promiscMode with hairpinMode:\n%s", s)
	}
	for _, want := range []string{`"subnet": "10.112.3.0/24"`, `"ipMasq": false`, `"dataDir": "/n/cni/ipam"`, `"type": "portmap"`} {
		if !strings.Contains(s, want) {
			t.Errorf("CNI config lacks %s:\n%s", want, s)
		}
	}
}

func TestCheckPodCIDR(t *testing.T) {
	other := record{ClusterKey: "default/b", PodCIDR: "10.112.0.0/12", Config: NodeConfig{Server: "https://172.29.0.1:2"}}
	a := nodeprovider.Cluster{Key: "default/a", PodCIDR: "10.112.0.0/16", Join: &nodeprovider.Join{Server: "https://172.29.0.1:1"}}
	err := checkPodCIDR(a, []record{other})
	if err == nil || !strings.Contains(err.Error(), "cluster default/b") || !strings.Contains(err.Error(), "spec.network.podCIDR") {
		t.Errorf("overlapping pod ranges: %v", err)
	}
	a.PodCIDR = "10.128.0.0/16"
	if err := checkPodCIDR(a, []record{other}); err != nil {
		t.Errorf("disjoint pod ranges: %v", err)
	}
	joined := nodeprovider.Cluster{Key: "joined/default.b", PodCIDR: "10.112.0.0/12", Join: &nodeprovider.Join{Server: "https://172.29.0.1:2"}}
	if err := checkPodCIDR(joined, []record{other}); err != nil {
		t.Errorf("a node joined to the same cluster: %v", err)
	}
}

func TestParseProviderID(t *testing.T) {
	key, node, ok := parseProviderID(ProviderID("default/demo", "demo-cpu-1"))
	if !ok || key != "default/demo" || node != "demo-cpu-1" {
		t.Errorf("parseProviderID = %q %q %v", key, node, ok)
	}
	for _, bad := range []string{"kwok://demo/n", "local://demo/n", "local://a/../n", "local://a/b/c/d"} {
		if _, _, ok := parseProviderID(bad); ok {
			t.Errorf("parseProviderID(%q) accepted", bad)
		}
	}
}

// TestKubeletConfigDecodes decodes the rendered configuration strictly into
// the kubelet's own type: every field name is one the kubelet knows.
func TestKubeletConfigDecodes(t *testing.T) {
	data, err := KubeletConfig(Layout{Dir: "/n"}, KubeletSpec{
		NodeIP: netip.MustParseAddr("172.29.0.2"), ProviderID: "local://default/demo/n", CgroupRoot: "/fke/x",
		ClusterDNS: "10.96.0.10", Taints: []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}},
		Reserved: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		MaxPods:  110, ServerTLSBootstrap: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var cfg kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("kubelet configuration: %v\n%s", err, data)
	}
	if cfg.SystemReserved["memory"] != "1Gi" || cfg.SystemReserved["cpu"] != "" || len(cfg.RegisterWithTaints) != 1 || cfg.Address != "172.29.0.2" {
		t.Errorf("decoded %+v", cfg)
	}
}

// TestProxyConfigDecodes decodes kube-proxy's configuration strictly into
// its own type.
func TestProxyConfigDecodes(t *testing.T) {
	data, err := ProxyConfig(Layout{Dir: "/n"}, ProxySpec{NodeName: "n", NodeIP: netip.MustParseAddr("172.29.0.2"), ClusterCIDR: "10.112.0.0/12"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg proxyv1alpha1.KubeProxyConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("kube-proxy configuration: %v\n%s", err, data)
	}
	if cfg.Mode != "iptables" || cfg.HostnameOverride != "n" || cfg.Conntrack.MaxPerCore == nil || *cfg.Conntrack.MaxPerCore != 0 {
		t.Errorf("decoded %+v", cfg)
	}
}

func TestPauseImage(t *testing.T) {
	for _, c := range []struct{ configured, registry, want string }{
		{"my/pause:1", "172.29.0.1:5000", "my/pause:1"},
		{"", "172.29.0.1:5000", "172.29.0.1:5000/fke/pause:1.0"},
		{"", "", DefaultPauseImage},
	} {
		if got := pauseImage(c.configured, c.registry); got != c.want {
			t.Errorf("pauseImage(%q, %q) = %q, want %q", c.configured, c.registry, got, c.want)
		}
	}
}

// The registry is trusted over plain HTTP by every name users see: its
// bridge address, and the loopback names that `fke image push` prints,
// each a hosts.toml under config_path that sends pulls to the bridge
// address. Both files are TOML that containerd reads.
func TestContainerdConfigTrustsRegistry(t *testing.T) {
	l := Layout{Dir: "/d"}
	spec := ContainerdSpec{PauseImage: "172.29.0.1:5000/fke/pause:1.0", Registry: "172.29.0.1:5000"}
	var cfg struct {
		Plugins map[string]struct {
			SandboxImage string `toml:"sandbox_image"`
			Registry     struct {
				ConfigPath string         `toml:"config_path"`
				Mirrors    map[string]any `toml:"mirrors"`
			} `toml:"registry"`
		} `toml:"plugins"`
	}
	if _, err := toml.Decode(ContainerdConfig(l, spec), &cfg); err != nil {
		t.Fatalf("containerd config: %v", err)
	}
	cri := cfg.Plugins["io.containerd.grpc.v1.cri"]
	if cri.SandboxImage != spec.PauseImage || cri.Registry.ConfigPath != "/d/containerd/certs.d" || cri.Registry.Mirrors != nil {
		t.Errorf("cri plugin: sandbox %q, config_path %q, mirrors %v", cri.SandboxImage, cri.Registry.ConfigPath, cri.Registry.Mirrors)
	}

	hosts := RegistryHosts(spec)
	if got, want := slices.Sorted(maps.Keys(hosts)), []string{"127.0.0.1:5000", "172.29.0.1:5000", "localhost:5000"}; !slices.Equal(got, want) {
		t.Fatalf("hosts.toml of %v, want %v", got, want)
	}
	for name, data := range hosts {
		// containerd 1.6 refuses a file without a host table.
		var h struct {
			Server string `toml:"server"`
			Host   map[string]struct {
				Capabilities []string `toml:"capabilities"`
			} `toml:"host"`
		}
		md, err := toml.Decode(data, &h)
		if err != nil {
			t.Fatalf("hosts.toml of %s: %v\n%s", name, err, data)
		}
		mirror, ok := h.Host["http://172.29.0.1:5000"]
		if h.Server != "http://172.29.0.1:5000" || len(h.Host) != 1 || !ok || !slices.Equal(mirror.Capabilities, []string{"pull", "resolve"}) || len(md.Undecoded()) != 0 {
			t.Errorf("hosts.toml of %s: server %q, hosts %v, other keys %v", name, h.Server, h.Host, md.Undecoded())
		}
	}

	// Without a registry: containerd's defaults, no host directory.
	cfg.Plugins = nil
	if _, err := toml.Decode(ContainerdConfig(l, ContainerdSpec{PauseImage: DefaultPauseImage}), &cfg); err != nil {
		t.Fatal(err)
	}
	if p := cfg.Plugins["io.containerd.grpc.v1.cri"].Registry.ConfigPath; p != "" || RegistryHosts(ContainerdSpec{}) != nil {
		t.Errorf("a node without a registry has registry hosts (config_path %q)", p)
	}
}

func TestRegistryNames(t *testing.T) {
	for _, c := range []struct {
		reg  string
		want []string
	}{
		{"172.29.0.1:5000", []string{"172.29.0.1:5000", "127.0.0.1:5000", "localhost:5000"}},
		{"registry.example", []string{"registry.example"}},
		{"", nil},
	} {
		if got := RegistryNames(c.reg); !slices.Equal(got, c.want) {
			t.Errorf("RegistryNames(%q) = %v, want %v", c.reg, got, c.want)
		}
	}
}

// FuzzKubeletConfig: whatever the pool's taints and the node's identity,
// the rendered configuration is one the kubelet reads (strictly, as its
// own type) and says what was asked.
func FuzzKubeletConfig(f *testing.F) {
	f.Add("nvidia.com/gpu", "present", "NoSchedule", "local://default/demo/n1", "/fke/n1", "10.96.0.10", int32(110))
	f.Add("a: b", "\"quoted\"\n", "NoExecute", "", "", "", int32(0))
	f.Fuzz(func(t *testing.T, key, value, effect, providerID, cgroupRoot, dns string, maxPods int32) {
		// Taints reach the renderer only after admission (schema and
		// webhook); the other fields are fke's own, never control characters.
		if len(validation.IsQualifiedName(key)) > 0 || len(validation.IsValidLabelValue(value)) > 0 {
			t.Skip("admission refuses this taint")
		}
		for _, s := range []string{effect, providerID, cgroupRoot, dns} {
			if !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
				t.Skip("not a string fke renders")
			}
		}
		spec := KubeletSpec{
			NodeIP: netip.MustParseAddr("172.29.0.2"), ProviderID: providerID, CgroupRoot: cgroupRoot, ClusterDNS: dns,
			Taints:   []corev1.Taint{{Key: key, Value: value, Effect: corev1.TaintEffect(effect)}},
			Reserved: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}, MaxPods: maxPods,
		}
		data, err := KubeletConfig(Layout{Dir: "/n"}, spec)
		if err != nil {
			t.Fatal(err)
		}
		var got kubeletv1beta1.KubeletConfiguration
		if err := yaml.UnmarshalStrict(data, &got); err != nil {
			t.Fatalf("the kubelet cannot read it: %v\n%s", err, data)
		}
		if got.ProviderID != providerID || got.CgroupRoot != cgroupRoot || got.MaxPods != maxPods ||
			len(got.RegisterWithTaints) != 1 || got.RegisterWithTaints[0] != spec.Taints[0] {
			t.Fatalf("rendered %+v from %+v", got, spec)
		}
		if dns != "" && (len(got.ClusterDNS) != 1 || got.ClusterDNS[0] != dns) {
			t.Fatalf("clusterDNS %v, want %q", got.ClusterDNS, dns)
		}
	})
}

// TestKubeletStatusFrequency: a GPU node's kubelet computes its status
// every 500 ms, any other's every 2 s; both send it every minute.
func TestKubeletStatusFrequency(t *testing.T) {
	for _, tt := range []struct {
		gpu  bool
		want time.Duration
	}{{true, 500 * time.Millisecond}, {false, 2 * time.Second}} {
		data, err := KubeletConfig(Layout{Dir: "/n"}, KubeletSpec{NodeIP: netip.MustParseAddr("172.29.0.2"), GPU: tt.gpu})
		if err != nil {
			t.Fatal(err)
		}
		var cfg kubeletv1beta1.KubeletConfiguration
		if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.NodeStatusUpdateFrequency.Duration != tt.want || cfg.NodeStatusReportFrequency.Duration != time.Minute {
			t.Errorf("GPU %v: status computed every %v, sent every %v; want %v and 1m", tt.gpu, cfg.NodeStatusUpdateFrequency.Duration, cfg.NodeStatusReportFrequency.Duration, tt.want)
		}
	}
}
