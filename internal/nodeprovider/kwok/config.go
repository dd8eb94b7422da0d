package kwok

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"fke.dev/fke/internal/controlplane"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	metricsresource "sigs.k8s.io/kwok/kustomize/metrics/resource"
	metricsusage "sigs.k8s.io/kwok/kustomize/metrics/usage"
	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/yaml"
)

// Tuning of the kwok controller for fleets of about a thousand nodes per
// tenant cluster. kwok's API client is not rate limited, so the parallelism
// values are the number of requests kwok has in flight per kind of work:
// enough to hide API latency, few enough not to starve a tenant API server
// that shares two cores with the rest of the control plane.
const (
	// nodePlayStageParallelism workers move nodes through their stages
	// (initialize: one status patch per new node).
	nodePlayStageParallelism = 16
	// nodeLeaseParallelism workers renew node leases: with 1,000 nodes and
	// a renewal every quarter of the lease, about 100 updates a second.
	nodeLeaseParallelism = 16
	// podPlayStageParallelism workers move pods through their stages.
	podPlayStageParallelism = 16
	// podsOnNodeSyncParallelism workers resync the pods of a node that kwok
	// starts managing (after a restart of kwok).
	podsOnNodeSyncParallelism = 4
	// nodeLeaseDurationSeconds matches the kubelet's default
	// (kube-controller-manager's node-monitor-grace-period is 40s too).
	nodeLeaseDurationSeconds = 40
)

// Constants of kwok's configuration and command line.
const (
	configAPIVersion = "config.kwok.x-k8s.io/v1alpha1"
	configKind       = "KwokConfiguration"
	// DefaultPodCIDR is the pod range kwok assigns pod IPs from when the
	// cluster has none.
	DefaultPodCIDR = "10.244.0.0/16"
	// DefaultNodeIP is the InternalIP of every simulated node: kwok serves
	// their kubelet API (if any) on this machine.
	DefaultNodeIP = "127.0.0.1"
)

// kwokConfiguration is the part of kwok's KwokConfiguration
// (config.kwok.x-k8s.io/v1alpha1) fke sets.
type kwokConfiguration struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Options    kwokOptions `json:"options"`
}

type kwokOptions struct {
	CIDR                      string `json:"cidr"`
	NodeIP                    string `json:"nodeIP"`
	PodPlayStageParallelism   uint   `json:"podPlayStageParallelism"`
	NodePlayStageParallelism  uint   `json:"nodePlayStageParallelism"`
	NodeLeaseParallelism      uint   `json:"nodeLeaseParallelism"`
	PodsOnNodeSyncParallelism uint   `json:"podsOnNodeSyncParallelism"`
	NodeLeaseDurationSeconds  uint   `json:"nodeLeaseDurationSeconds"`
	EnableProfilingHandler    bool   `json:"enableProfilingHandler"`
}

// AnnotationPodDeleteDelay on a pod of a kwok node ("20s", a Go duration)
// keeps it Terminating that long after it is deleted, as a pod whose
// containers take that long to stop; without it a deleted pod goes at once.
// It is kwok's own annotation (read by its general pod-delete stage).
const AnnotationPodDeleteDelay = "pod-delete.stage.kwok.x-k8s.io/delay"

// podDeleteStage is kwok's fast pod-delete stage with the delay of
// AnnotationPodDeleteDelay (none by default).
const podDeleteStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["` + AnnotationPodDeleteDelay + `"]'
  next:
    delete: true
`

// Simulated resource use. kwok serves each node's kubelet resource
// metrics (/metrics/resource, what metrics-server scrapes) at
// /metrics/nodes/<node>/metrics/resource of its server, computed from
// kwok's own Metric and ClusterResourceUsage objects: a container uses
// the CPU and memory its pod's annotations say (AnnotationUsageCPU,
// AnnotationUsageMemory; 1m and 1Mi without them), and its CPU time grows
// at that rate. Both annotations are kwok's own.
const (
	AnnotationUsageCPU    = "kwok.x-k8s.io/usage-cpu"
	AnnotationUsageMemory = "kwok.x-k8s.io/usage-memory"
	// AnnotationResourceMetricsPath on a Node tells metrics-server where
	// the node's resource metrics are (metrics-server's own annotation).
	AnnotationResourceMetricsPath = "metrics.k8s.io/resource-metrics-path"
)

// ResourceMetricsPath is where kwok serves the resource metrics of node.
func ResourceMetricsPath(node string) string { return "/metrics/nodes/" + node + "/metrics/resource" }

// A real node uses some CPU and memory with no pod on it (the kubelet, the
// container runtime, the system), and its kubelet reports that usage from
// the start. kwok's node usage is the sum of its pods' alone, and
// metrics-server drops a node whose CPU or memory usage is zero, so a kwok
// node without pods would have no NodeMetrics (`kubectl top nodes` would
// show nothing). fke's Metric adds to the pods' usage the node's idle usage,
// which the provider writes on each Node it makes (IdleUsage of the node's
// capacity) and a user may change, quantities as in kwok's pod annotations.
// A Node without them (made by an earlier fke) idles at the usage of an
// empty node. The node's idle CPU time grows at its idle rate from its
// creation, when a kwok node becomes Ready.
const (
	AnnotationIdleUsageCPU    = "fke.dev/idle-usage-cpu"
	AnnotationIdleUsageMemory = "fke.dev/idle-usage-memory"
)

// Idle usage of a simulated node: a base and a share of the node's size,
// bounded, much as a kubelet and container runtime with a few system
// daemons use on an idle machine: 32m and 160Mi on 2 CPUs and 8Gi, 38m and
// 256Mi on 8 CPUs and 32Gi, 222m and 1Gi on 192 CPUs and 2000Gi.
const (
	idleCPUBaseMilli     = 30
	idleCPUMilliPerCore  = 1
	idleCPUMaxMilli      = 250
	idleMemoryBase       = 128 << 20
	idleMemoryShare      = 256 // 1/256 of the node's memory
	idleMemoryMax        = 1 << 30
	idleMemoryRoundBytes = 1 << 20
)

// IdleUsage returns the CPU and memory a node of the given capacity uses
// with no pods: see the constants above. Pure.
func IdleUsage(capacity corev1.ResourceList) (cpu, memory resource.Quantity) {
	cores := capacity.Cpu().MilliValue() / 1000
	cpuMilli := min(idleCPUBaseMilli+idleCPUMilliPerCore*cores, idleCPUMaxMilli)
	mem := min(idleMemoryBase+capacity.Memory().Value()/idleMemoryShare, idleMemoryMax)
	mem -= mem % idleMemoryRoundBytes
	return *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI), *resource.NewQuantity(mem, resource.BinarySI)
}

// nodeUsageExpressions returns the CEL expressions of a node's CPU time
// (core-seconds) and memory working set (bytes) in kwok's Metric: its
// idle usage (AnnotationIdleUsageCPU and AnnotationIdleUsageMemory, or
// IdleUsage of an empty node) plus its pods'. kwok's Quantity has no
// conversion to a number, so the pods' usage (a number) becomes a Quantity
// through its decimal string.
func nodeUsageExpressions() (cpu, memory string) {
	cpuIdle, memIdle := IdleUsage(nil)
	annotation := func(key string, fallback resource.Quantity) string {
		return fmt.Sprintf(`("%[1]s" in node.metadata.annotations ? Quantity(node.metadata.annotations["%[1]s"]) : Quantity("%[2]s"))`, key, fallback.String())
	}
	cpu = annotation(AnnotationIdleUsageCPU, cpuIdle) + ` * node.SinceSecond() + Quantity(string(node.CumulativeUsage("cpu")))`
	memory = annotation(AnnotationIdleUsageMemory, memIdle) + ` + Quantity(string(node.Usage("memory")))`
	return cpu, memory
}

// Container start times in kwok's default resource Metric are seconds
// since the pod started, not since the epoch as the kubelet reports them:
// metrics-server then takes every scrape for a restarted container and
// serves a pod's metrics only after about a minute. fke reports the pod's
// creation as the start, which does not move.
const (
	kwokStartTime  = `value: 'pod.SinceSecond()'`
	fixedStartTime = `value: 'UnixSecond(pod.metadata.creationTimestamp)'`
)

// Node usage in kwok's default resource Metric: its pods' alone.
const (
	kwokNodeCPU    = `value: 'node.CumulativeUsage("cpu")'`
	kwokNodeMemory = `value: 'node.Usage("memory")'`
)

// usageObjects returns kwok's Metric (the kubelet's resource metrics, with
// fixed container start times and nodes' idle usage) and
// ClusterResourceUsage (use from pod annotations) objects; an error when
// kwok's default Metric no longer has what fke changes.
func usageObjects() ([]string, error) {
	cpu, memory := nodeUsageExpressions()
	metric := metricsresource.DefaultMetricsResource
	for _, r := range []struct{ old, new string }{
		{kwokStartTime, fixedStartTime},
		{kwokNodeCPU, "value: '" + cpu + "'"},
		{kwokNodeMemory, "value: '" + memory + "'"},
	} {
		if strings.Count(metric, r.old) != 1 {
			return nil, fmt.Errorf("kwok's resource Metric has no single %s", r.old)
		}
		metric = strings.Replace(metric, r.old, r.new, 1)
	}
	return []string{metric, metricsusage.DefaultUsageFromAnnotation}, nil
}

// nodeNotReadyStage turns a Ready node annotated AnnotationSimulateNotReady
// NotReady; the node stages below leave such a node alone until the
// annotation goes, when node-initialize makes it Ready again.
const nodeNotReadyStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: fke-node-not-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.metadata.annotations["` + AnnotationSimulateNotReady + `"]'
      operator: 'Exists'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values:
      - 'True'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: "container runtime is down (simulated: ` + AnnotationSimulateNotReady + `)"
        reason: KubeletNotReady
        status: "False"
        type: Ready
`

// stages returns the Stage objects fke runs kwok with: nodes become Ready
// at once and keep a lease; pods become Running at once, complete when
// their containers are all done, and go away when deleted (after the delay
// of AnnotationPodDeleteDelay, if any); a node annotated
// AnnotationSimulateNotReady goes NotReady. The node and pod stages are
// kwok's standard "fast" ones, the node stages told to skip simulated
// faults.
func stages() ([]string, error) {
	var out []string
	for _, s := range []string{nodefast.DefaultNodeInit, nodeheartbeat.DefaultNodeHeartbeatWithLease} {
		s, err := skipSimulatedFaults(s)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return append(out, nodeNotReadyStage, podfast.DefaultPodReady, podfast.DefaultPodComplete, podDeleteStage), nil
}

// skipSimulatedFaults adds to a node Stage's selector that the node has no
// AnnotationSimulateNotReady.
func skipSimulatedFaults(stage string) (string, error) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(stage), &obj); err != nil {
		return "", fmt.Errorf("reading kwok stage: %w", err)
	}
	spec, _ := obj["spec"].(map[string]any)
	sel, _ := spec["selector"].(map[string]any)
	if sel == nil {
		return "", fmt.Errorf("kwok stage %v has no selector", obj["metadata"])
	}
	exprs, _ := sel["matchExpressions"].([]any)
	sel["matchExpressions"] = append(exprs, map[string]any{
		"key": `.metadata.annotations["` + AnnotationSimulateNotReady + `"]`, "operator": "DoesNotExist",
	})
	data, err := yaml.Marshal(obj)
	if err != nil {
		return "", err
	}
	return string(data), nil
}

// renderConfig returns the multi-document YAML of kwok's --config file: a
// KwokConfiguration and the Stage objects. An empty podCIDR or nodeIP takes
// the default; anything else must be a CIDR and an IP address.
func renderConfig(podCIDR, nodeIP string) ([]byte, error) {
	if podCIDR == "" {
		podCIDR = DefaultPodCIDR
	}
	if nodeIP == "" {
		nodeIP = DefaultNodeIP
	}
	if _, err := netip.ParsePrefix(podCIDR); err != nil {
		return nil, fmt.Errorf("rendering kwok configuration: pod CIDR %q: %w", podCIDR, err)
	}
	if _, err := netip.ParseAddr(nodeIP); err != nil {
		return nil, fmt.Errorf("rendering kwok configuration: node IP %q: %w", nodeIP, err)
	}
	cfg := kwokConfiguration{
		APIVersion: configAPIVersion,
		Kind:       configKind,
		Options: kwokOptions{
			CIDR:                      podCIDR,
			NodeIP:                    nodeIP,
			PodPlayStageParallelism:   podPlayStageParallelism,
			NodePlayStageParallelism:  nodePlayStageParallelism,
			NodeLeaseParallelism:      nodeLeaseParallelism,
			PodsOnNodeSyncParallelism: podsOnNodeSyncParallelism,
			NodeLeaseDurationSeconds:  nodeLeaseDurationSeconds,
		},
	}
	head, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("rendering kwok configuration: %w", err)
	}
	docs := []string{strings.TrimSpace(string(head))}
	all, err := stages()
	if err != nil {
		return nil, fmt.Errorf("rendering kwok configuration: %w", err)
	}
	usage, err := usageObjects()
	if err != nil {
		return nil, fmt.Errorf("rendering kwok configuration: %w", err)
	}
	for _, s := range append(all, usage...) {
		docs = append(docs, strings.TrimSpace(s))
	}
	return []byte(strings.Join(docs, "\n---\n") + "\n"), nil
}

// args returns kwok's command line. Nodes advertise serverPort as their
// kubelet port, where kwok serves their kubelet API (HTTP and HTTPS on one
// port); with certFile and keyFile its HTTPS uses that certificate rather
// than a self-signed one.
func args(kubeconfigPath, configPath, serverHost string, serverPort int, certFile, keyFile string) []string {
	out := []string{
		"--kubeconfig=" + kubeconfigPath,
		"--config=" + configPath,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + AnnotationNode + "=" + AnnotationNodeValue,
		"--server-address=" + net.JoinHostPort(serverHost, strconv.Itoa(serverPort)),
		"--node-port=" + strconv.Itoa(serverPort),
	}
	if certFile != "" && keyFile != "" {
		out = append(out, "--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile)
	}
	return out
}

// Files of kwok in a workload, under controlplane.KwokWorkloadDir.
const (
	workloadKubeconfig = "kubeconfig"
	workloadConfig     = "kwok.yaml"
)

// workloadArgs returns kwok's command line in a workload: files under
// controlplane.KwokWorkloadDir, the kubelet API of its nodes served on the pod's
// controlplane.KwokWorkloadPort (kwok's self-signed certificate), /healthz for the probes.
func workloadArgs() []string {
	return args(controlplane.KwokWorkloadDir+"/"+workloadKubeconfig, controlplane.KwokWorkloadDir+"/"+workloadConfig, "0.0.0.0", controlplane.KwokWorkloadPort, "", "")
}

// kubeconfigFor renders cfg (a tenant's admin rest.Config) as a kubeconfig.
func kubeconfigFor(cfg *rest.Config) *clientcmdapi.Config {
	const name = "tenant"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthority:     cfg.CAFile,
		CertificateAuthorityData: cfg.CAData,
		InsecureSkipTLSVerify:    cfg.Insecure,
		TLSServerName:            cfg.ServerName,
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		ClientCertificate:     cfg.CertFile,
		ClientCertificateData: cfg.CertData,
		ClientKey:             cfg.KeyFile,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
		TokenFile:             cfg.BearerTokenFile,
		Username:              cfg.Username,
		Password:              cfg.Password,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	return kc
}

// writeFiles writes kwok's kubeconfig and configuration into dir.
func writeFiles(dir string, cfg *rest.Config, podCIDR, nodeIP string) (kubeconfigPath, configPath string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("creating %s: %w", dir, err)
	}
	kubeconfigPath = filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfigFor(cfg), kubeconfigPath); err != nil {
		return "", "", fmt.Errorf("writing kwok kubeconfig: %w", err)
	}
	// WriteToFile keeps the mode of an existing file.
	if err := os.Chmod(kubeconfigPath, 0o600); err != nil {
		return "", "", fmt.Errorf("writing kwok kubeconfig: %w", err)
	}
	data, err := renderConfig(podCIDR, nodeIP)
	if err != nil {
		return "", "", err
	}
	configPath = filepath.Join(dir, "kwok.yaml")
	if err := os.WriteFile(configPath, data, 0o600); err != nil {
		return "", "", fmt.Errorf("writing kwok configuration: %w", err)
	}
	return kubeconfigPath, configPath, nil
}
