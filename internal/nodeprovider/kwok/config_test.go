package kwok

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"fke.dev/fke/internal/nodeprovider"
)

// docs splits a multi-document YAML file into generic objects.
func docs(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("parsing document %q: %v", doc, err)
		}
		out = append(out, obj)
	}
	return out
}

func TestRenderConfig(t *testing.T) {
	tests := []struct {
		name             string
		podCIDR, nodeIP  string
		wantCIDR, wantIP string
	}{
		{name: "cluster values", podCIDR: "10.88.0.0/16", nodeIP: "10.1.2.3", wantCIDR: "10.88.0.0/16", wantIP: "10.1.2.3"},
		{name: "defaults", wantCIDR: DefaultPodCIDR, wantIP: DefaultNodeIP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := renderConfig(tt.podCIDR, tt.nodeIP)
			if err != nil {
				t.Fatal(err)
			}
			objs := docs(t, data)
			cfg := objs[0]
			if cfg["apiVersion"] != "config.kwok.x-k8s.io/v1alpha1" || cfg["kind"] != "KwokConfiguration" {
				t.Fatalf("first document is %v %v, want the KwokConfiguration", cfg["apiVersion"], cfg["kind"])
			}
			opts, _ := cfg["options"].(map[string]any)
			// kwok does not default these when read from --config: zero stalls it.
			for _, key := range []string{
				"podPlayStageParallelism", "nodePlayStageParallelism", "nodeLeaseParallelism",
				"podsOnNodeSyncParallelism", "nodeLeaseDurationSeconds",
			} {
				if v, _ := opts[key].(float64); v <= 0 {
					t.Errorf("options.%s = %v, want > 0", key, opts[key])
				}
			}
			if opts["nodeLeaseDurationSeconds"] != float64(40) {
				t.Errorf("options.nodeLeaseDurationSeconds = %v, want 40", opts["nodeLeaseDurationSeconds"])
			}
			if opts["cidr"] != tt.wantCIDR || opts["nodeIP"] != tt.wantIP {
				t.Errorf("options cidr, nodeIP = %v, %v; want %s, %s", opts["cidr"], opts["nodeIP"], tt.wantCIDR, tt.wantIP)
			}

			var stages []string
			kinds := map[string]int{}
			for _, obj := range objs[1:] {
				kind, _ := obj["kind"].(string)
				kinds[kind]++
				if obj["apiVersion"] != "kwok.x-k8s.io/v1alpha1" || (kind != "Stage" && kind != "Metric" && kind != "ClusterResourceUsage") {
					t.Errorf("document %v %v, want a kwok Stage, Metric or ClusterResourceUsage", obj["apiVersion"], obj["kind"])
				}
				if kind == "Metric" {
					// The kubelet's resource metrics, where nodes say they are.
					spec, _ := obj["spec"].(map[string]any)
					if spec["path"] != "/metrics/nodes/{nodeName}/metrics/resource" || ResourceMetricsPath("n1") != "/metrics/nodes/n1/metrics/resource" {
						t.Errorf("metric path %v, nodes point at %s", spec["path"], ResourceMetricsPath("n1"))
					}
					// Container start times since the epoch, as a kubelet's.
					values := map[string]string{}
					for _, m := range spec["metrics"].([]any) {
						m := m.(map[string]any)
						values[m["name"].(string)], _ = m["value"].(string)
					}
					if v := values["container_start_time_seconds"]; v != "UnixSecond(pod.metadata.creationTimestamp)" {
						t.Errorf("container start time %q is not an epoch time", v)
					}
					// A node uses its idle usage besides its pods'.
					cpu, memory := values["node_cpu_usage_seconds_total"], values["node_memory_working_set_bytes"]
					for _, want := range []string{`node.metadata.annotations["` + AnnotationIdleUsageCPU + `"]`, `Quantity("30m")`, "node.SinceSecond()", `node.CumulativeUsage("cpu")`} {
						if !strings.Contains(cpu, want) {
							t.Errorf("node CPU %q lacks %s", cpu, want)
						}
					}
					for _, want := range []string{`node.metadata.annotations["` + AnnotationIdleUsageMemory + `"]`, `Quantity("128Mi")`, `node.Usage("memory")`} {
						if !strings.Contains(memory, want) {
							t.Errorf("node memory %q lacks %s", memory, want)
						}
					}
					continue
				}
				if kind == "ClusterResourceUsage" {
					if text := fmt.Sprint(obj["spec"]); !strings.Contains(text, AnnotationUsageCPU) || !strings.Contains(text, AnnotationUsageMemory) {
						t.Errorf("usage does not read the pod annotations: %s", text)
					}
					continue
				}
				meta, _ := obj["metadata"].(map[string]any)
				name, _ := meta["name"].(string)
				stages = append(stages, name)
				if name == "pod-delete" {
					// A deleted pod stays Terminating for the delay its
					// annotation asks for, none without it.
					spec, _ := obj["spec"].(map[string]any)
					delay, _ := spec["delay"].(map[string]any)
					from, _ := delay["durationFrom"].(map[string]any)
					if delay["durationMilliseconds"] != float64(0) || !strings.Contains(fmt.Sprint(from["expressionFrom"]), AnnotationPodDeleteDelay) {
						t.Errorf("pod-delete delay = %v, want 0 unless %s says otherwise", delay, AnnotationPodDeleteDelay)
					}
				}
			}
			if kinds["Metric"] != 1 || kinds["ClusterResourceUsage"] != 1 {
				t.Errorf("kinds %v, want one Metric and one ClusterResourceUsage", kinds)
			}
			for _, want := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete"} {
				if !slices.Contains(stages, want) {
					t.Errorf("stages %v lack %s", stages, want)
				}
			}
		})
	}
}

func TestArgs(t *testing.T) {
	got := args("/d/kubeconfig", "/d/kwok.yaml", "127.0.0.1", 4321, "/d/serving.crt", "/d/serving.key")
	for _, want := range []string{
		"--kubeconfig=/d/kubeconfig",
		"--config=/d/kwok.yaml",
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--server-address=127.0.0.1:4321",
		"--node-port=4321",
		"--tls-cert-file=/d/serving.crt",
		"--tls-private-key-file=/d/serving.key",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("args %q lack %q", got, want)
		}
	}
	for _, a := range args("/d/kubeconfig", "/d/kwok.yaml", "127.0.0.1", 4321, "", "") {
		if strings.HasPrefix(a, "--tls-") {
			t.Errorf("without a certificate: %s", a)
		}
	}
}

func TestWriteFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "default", "demo", "kwok")
	cfg := &rest.Config{
		Host: "https://127.0.0.1:6443",
		TLSClientConfig: rest.TLSClientConfig{
			CAData: []byte("ca"), CertData: []byte("cert"), KeyData: []byte("key"),
		},
	}
	kubeconfigPath, configPath, err := writeFiles(dir, cfg, "10.244.0.0/16", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{kubeconfigPath, configPath} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", p, st.Mode().Perm())
		}
	}
	kc, err := clientcmd.LoadFromFile(kubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := kc.Contexts[kc.CurrentContext]
	if ctx == nil {
		t.Fatalf("kubeconfig has no current context")
	}
	cluster, user := kc.Clusters[ctx.Cluster], kc.AuthInfos[ctx.AuthInfo]
	if cluster.Server != cfg.Host || string(cluster.CertificateAuthorityData) != "ca" {
		t.Errorf("cluster = %+v, want server %s and the CA data", cluster, cfg.Host)
	}
	if string(user.ClientCertificateData) != "cert" || string(user.ClientKeyData) != "key" {
		t.Errorf("user = %+v, want the client certificate and key data", user)
	}
}

func TestParseProviderID(t *testing.T) {
	tests := []struct {
		id                string
		wantCluster, node string
		ok                bool
	}{
		{id: "kwok://demo/n1", wantCluster: "demo", node: "n1", ok: true},
		{id: ProviderID("demo", "gpu-0"), wantCluster: "demo", node: "gpu-0", ok: true},
		{id: "fake://demo/n1"},
		{id: "kwok://demo"},
		{id: "kwok:///n1"},
		{id: "kwok://demo/"},
		{id: "kwok://demo/a/b"},
		{id: ""},
	}
	for _, tt := range tests {
		c, n, ok := parseProviderID(tt.id)
		if ok != tt.ok || c != tt.wantCluster || n != tt.node {
			t.Errorf("parseProviderID(%q) = %q, %q, %v; want %q, %q, %v", tt.id, c, n, ok, tt.wantCluster, tt.node, tt.ok)
		}
	}
}

func TestClusterDir(t *testing.T) {
	p := New(Options{DataDir: "/data"})
	tests := []struct {
		key     string
		want    string
		wantErr bool
	}{
		{key: "default/demo", want: "/data/default/demo/kwok"},
		{key: "demo", wantErr: true},
		{key: "/demo", wantErr: true},
		{key: "default/", wantErr: true},
		{key: "a/b/c", wantErr: true},
		{key: "../x", wantErr: true},
	}
	for _, tt := range tests {
		got, err := p.clusterDir(tt.key)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("clusterDir(%q) = %q, %v; want %q, error %v", tt.key, got, err, tt.want, tt.wantErr)
		}
	}
	if _, err := New(Options{}).clusterDir("default/demo"); err == nil {
		t.Error("clusterDir without a data directory succeeded")
	}
}

func TestIdleUsage(t *testing.T) {
	tests := []struct {
		name        string
		cpu, memory string // capacity; "" = none
		wantCPU     string
		wantMemory  string
	}{
		{"no capacity", "", "", "30m", "128Mi"},
		{"cpu-small", "2", "8Gi", "32m", "160Mi"},
		{"cpu-medium", "8", "32Gi", "38m", "256Mi"},
		{"gpu-a100x1", "12", "170Gi", "42m", "808Mi"},
		{"gpu-h100x8", "192", "2000Gi", "222m", "1Gi"},
		{"bounded", "1000", "8Ti", "250m", "1Gi"},
		{"a fraction of a CPU, memory not a whole MiB", "500m", "1000M", "30m", "131Mi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			capacity := corev1.ResourceList{}
			if tt.cpu != "" {
				capacity[corev1.ResourceCPU] = resource.MustParse(tt.cpu)
			}
			if tt.memory != "" {
				capacity[corev1.ResourceMemory] = resource.MustParse(tt.memory)
			}
			cpu, memory := IdleUsage(capacity)
			if cpu.String() != tt.wantCPU || memory.String() != tt.wantMemory {
				t.Errorf("IdleUsage = %s, %s; want %s, %s", cpu.String(), memory.String(), tt.wantCPU, tt.wantMemory)
			}
		})
	}
}

func TestNodeFor(t *testing.T) {
	tmpl := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-gpu-0", Labels: map[string]string{"nvidia.com/gpu.count": "8"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("96"), corev1.ResourceMemory: resource.MustParse("1Ti")},
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")},
		},
	}
	cluster := nodeprovider.Cluster{Key: "default/demo", Name: "demo"}
	node := nodeFor(cluster, nodeprovider.NodeSpec{MachineName: "gpu-abc", Template: tmpl})
	if node.Annotations[AnnotationNode] != "fake" || node.Annotations[AnnotationMachine] != "gpu-abc" {
		t.Errorf("annotations = %v", node.Annotations)
	}
	if node.Spec.ProviderID != "kwok://demo/demo-gpu-0" {
		t.Errorf("providerID = %q", node.Spec.ProviderID)
	}
	if node.Labels["nvidia.com/gpu.count"] != "8" || len(node.Spec.Taints) != 1 {
		t.Errorf("template labels or taints lost: %v %v", node.Labels, node.Spec.Taints)
	}
	if q := node.Status.Allocatable["nvidia.com/gpu"]; q.Value() != 8 {
		t.Errorf("allocatable GPUs = %v", q.String())
	}
	if tmpl.Annotations != nil || tmpl.Spec.ProviderID != "" {
		t.Error("nodeFor changed the template")
	}
	if cpu, mem := node.Annotations[AnnotationIdleUsageCPU], node.Annotations[AnnotationIdleUsageMemory]; cpu != "126m" || mem != "1Gi" {
		t.Errorf("idle usage %s, %s; want 126m, 1Gi (of 96 CPUs and 1Ti)", cpu, mem)
	}
	own := tmpl.DeepCopy()
	own.Annotations = map[string]string{AnnotationIdleUsageCPU: "1"}
	if got := nodeFor(cluster, nodeprovider.NodeSpec{MachineName: "gpu-abc", Template: own}); got.Annotations[AnnotationIdleUsageCPU] != "1" || got.Annotations[AnnotationIdleUsageMemory] != "1Gi" {
		t.Errorf("a template's own idle usage is not kept: %v", got.Annotations)
	}
	if !ours(node, cluster) {
		t.Error("ours(node) = false for a node the provider made")
	}
	if ours(node, nodeprovider.Cluster{Key: "default/other", Name: "other"}) {
		t.Error("ours(node) = true for another cluster")
	}
	if ours(tmpl, cluster) {
		t.Error("ours(template) = true for a node without annotations")
	}
}

func TestFingerprint(t *testing.T) {
	a := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CertData: []byte("a")}}
	b := rest.CopyConfig(a)
	if fingerprint(a) != fingerprint(b) {
		t.Error("equal configs differ")
	}
	b.CertData = []byte("b")
	if fingerprint(a) == fingerprint(b) {
		t.Error("new client certificate kept the fingerprint")
	}
	c := rest.CopyConfig(a)
	c.Host = "https://127.0.0.1:7443"
	if fingerprint(a) == fingerprint(c) {
		t.Error("new host kept the fingerprint")
	}
}

// TestStagesSkipSimulatedFaults: kwok's node stages leave a node with a
// simulated fault alone, and fke's own stage turns it NotReady.
func TestStagesSkipSimulatedFaults(t *testing.T) {
	all, err := stages()
	if err != nil {
		t.Fatal(err)
	}
	skipping := 0
	for _, s := range all {
		var obj struct {
			Metadata struct{ Name string }
			Spec     struct {
				ResourceRef struct{ Kind string } `json:"resourceRef"`
				Selector    struct {
					MatchExpressions []struct{ Key, Operator string } `json:"matchExpressions"`
				}
			}
		}
		if err := yaml.Unmarshal([]byte(s), &obj); err != nil {
			t.Fatalf("stage does not parse: %v\n%s", err, s)
		}
		if obj.Spec.ResourceRef.Kind != "Node" {
			continue
		}
		for _, e := range obj.Spec.Selector.MatchExpressions {
			if strings.Contains(e.Key, AnnotationSimulateNotReady) {
				switch {
				case obj.Metadata.Name == "fke-node-not-ready" && e.Operator == "Exists":
				case obj.Metadata.Name != "fke-node-not-ready" && e.Operator == "DoesNotExist":
					skipping++
				default:
					t.Errorf("stage %s: %s %s", obj.Metadata.Name, e.Key, e.Operator)
				}
			}
		}
	}
	if skipping != 2 {
		t.Errorf("%d of kwok's 2 node stages skip simulated faults", skipping)
	}
}
