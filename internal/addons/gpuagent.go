package addons

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"fke.dev/fke/internal/gpu/agentrbac"
	gpuconfig "fke.dev/fke/internal/gpu/config"
)

// GPU agent objects: one DaemonSet and ConfigMap per pool, named
// fke-gpu-agent-<pool>, in kube-system; the ServiceAccount, RBAC and the
// own-Node policy (agentrbac.RBAC) are shared by the cluster's pools.
const (
	GPUAgentName        = "fke-gpu-agent"
	gpuAgentConfigKey   = "config.yaml"
	gpuAgentConfigDir   = "/etc/fke-gpu-agent"
	gpuAgentHostRoot    = "/host"
	gpuAgentMetricsPort = 9400
	gpuAgentPoolLabel   = "fke.dev/nodepool"
)

// GPUAgentOptions configure the agent of one pool.
type GPUAgentOptions struct {
	// Pool is the pool's name (its nodes' fke.dev/nodepool label).
	Pool string
	// Image is the agent's image as nodes pull it.
	Image string
	// Backend is "real" or "mock:<name>" (gpuconfig.Config.Backend).
	Backend string
	// TimeSlicingReplicas shares each GPU that many times when ≥ 2.
	TimeSlicingReplicas int32
	// MIGStrategy is none (when empty), single or mixed.
	MIGStrategy string
}

// GPUAgentObjectName is the name of pool's DaemonSet and ConfigMap.
func GPUAgentObjectName(pool string) string { return GPUAgentName + "-" + pool }

// GPUAgentConfig renders the agent's configuration file for o: the backend,
// sharing and MIG strategy of the pool, the host's root at /host (to find
// the driver), metrics on :9400 (DCGM exporter's port).
func GPUAgentConfig(o GPUAgentOptions) ([]byte, error) {
	cfg := gpuconfig.Default()
	cfg.Backend = o.Backend
	cfg.NodeName = "" // from $NODE_NAME
	if o.MIGStrategy != "" {
		cfg.MIGStrategy = gpuconfig.MIGStrategy(o.MIGStrategy)
	}
	if o.TimeSlicingReplicas >= 2 {
		cfg.Sharing.TimeSlicing = &gpuconfig.TimeSlicing{Resources: []gpuconfig.ReplicatedResource{
			{Name: "nvidia.com/gpu", Replicas: int(o.TimeSlicingReplicas)},
		}}
	}
	cfg.DevicePlugin.DriverRoot = gpuAgentHostRoot
	cfg.DevicePlugin.CDISpecDir = gpuAgentHostRoot + gpuconfig.DefaultCDISpecDir
	cfg.Metrics.Address = fmt.Sprintf(":%d", gpuAgentMetricsPort)
	if _, mock := cfg.MockName(); mock {
		// Simulated GPUs recover as soon as a probe passes: faults injected
		// in tests and demos clear in seconds, not minutes.
		cfg.Health.ProbeInterval = metav1.Duration{Duration: 2 * time.Second}
		cfg.Health.RecoveryHold = metav1.Duration{Duration: 5 * time.Second}
	}
	check := cfg
	check.NodeName = "node" // each agent's $NODE_NAME
	if err := check.Validate(); err != nil {
		return nil, fmt.Errorf("GPU agent of pool %s: %w", o.Pool, err)
	}
	return yaml.Marshal(cfg)
}

// gpuAgentRBAC maps the kinds of agentrbac.RBAC to their resources.
var gpuAgentRBAC = map[string]schema.GroupVersionResource{
	"ServiceAccount":                   {Version: "v1", Resource: "serviceaccounts"},
	"ClusterRole":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"ValidatingAdmissionPolicy":        {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	"ValidatingAdmissionPolicyBinding": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
}

// EnsureGPUAgent installs or updates the GPU agent of one pool in the
// cluster at cfg by server-side apply (idempotent): the shared RBAC and
// own-Node policy, the pool's ConfigMap and its DaemonSet, which runs on
// the pool's nodes only. A changed configuration rolls the agent's pods
// (the nodes stay). It does not wait for the pods.
func EnsureGPUAgent(ctx context.Context, cfg *rest.Config, o GPUAgentOptions) error {
	if o.Pool == "" || o.Image == "" || o.Backend == "" {
		return errors.New("GPU agent: pool, image and backend are required")
	}
	conf, err := GPUAgentConfig(o)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("GPU agent: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("GPU agent: %w", err)
	}
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	for _, doc := range bytes.Split(agentrbac.RBAC, []byte("\n---\n")) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return fmt.Errorf("GPU agent RBAC: %w", err)
		}
		gvr, ok := gpuAgentRBAC[u.GetKind()]
		if !ok {
			return fmt.Errorf("GPU agent RBAC: unexpected kind %s", u.GetKind())
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if ns := u.GetNamespace(); ns != "" {
			ri = dyn.Resource(gvr).Namespace(ns)
		}
		if _, err := ri.Apply(ctx, u.GetName(), u, apply); err != nil {
			return fmt.Errorf("GPU agent: applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	name := GPUAgentObjectName(o.Pool)
	labels := map[string]string{"app.kubernetes.io/name": GPUAgentName, "app.kubernetes.io/managed-by": "fke", gpuAgentPoolLabel: o.Pool}
	if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Apply(ctx, corev1ac.ConfigMap(name, metav1.NamespaceSystem).
		WithLabels(labels).WithData(map[string]string{gpuAgentConfigKey: string(conf)}), apply); err != nil {
		return fmt.Errorf("GPU agent: applying ConfigMap %s: %w", name, err)
	}
	if _, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Apply(ctx, gpuAgentDaemonSet(o, labels, conf), apply); err != nil {
		return fmt.Errorf("GPU agent: applying DaemonSet %s: %w", name, err)
	}
	return nil
}

// DeleteGPUAgent removes pool's DaemonSet and ConfigMap (the shared RBAC
// stays for the cluster's other pools). Idempotent.
func DeleteGPUAgent(ctx context.Context, cs kubernetes.Interface, pool string) error {
	name := GPUAgentObjectName(pool)
	var errs []error
	if err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("GPU agent of pool %s: %w", pool, err)
	}
	return nil
}

// gpuAgentDaemonSet runs the agent on every node of the pool, whatever its
// taints: privileged (NVML opens the GPUs' device nodes), with the
// kubelet's device-plugin and pod-resources directories and the host's
// root (read-only, to find the driver) mounted.
func gpuAgentDaemonSet(o GPUAgentOptions, labels map[string]string, conf []byte) *appsv1ac.DaemonSetApplyConfiguration {
	name := GPUAgentObjectName(o.Pool)
	selector := map[string]string{"app.kubernetes.io/name": GPUAgentName, gpuAgentPoolLabel: o.Pool}
	sum := sha256.Sum256(conf)
	hostPath := func(vol, path string, t corev1.HostPathType) *corev1ac.VolumeApplyConfiguration {
		return corev1ac.Volume().WithName(vol).WithHostPath(corev1ac.HostPathVolumeSource().WithPath(path).WithType(t))
	}
	container := corev1ac.Container().WithName("agent").WithImage(o.Image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithArgs("--config", gpuAgentConfigDir+"/"+gpuAgentConfigKey).
		WithEnv(corev1ac.EnvVar().WithName("NODE_NAME").WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("spec.nodeName")))).
		WithPorts(corev1ac.ContainerPort().WithName("metrics").WithContainerPort(gpuAgentMetricsPort).WithProtocol(corev1.ProtocolTCP)).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceCPU: mustQuantity("10m"), corev1.ResourceMemory: mustQuantity("32Mi")}).
			WithLimits(corev1.ResourceList{corev1.ResourceMemory: mustQuantity("256Mi")})).
		WithSecurityContext(corev1ac.SecurityContext().WithPrivileged(true)).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("config").WithMountPath(gpuAgentConfigDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("device-plugins").WithMountPath(gpuconfig.DefaultPluginDir),
			corev1ac.VolumeMount().WithName("pod-resources").WithMountPath("/var/lib/kubelet/pod-resources"),
			corev1ac.VolumeMount().WithName("host").WithMountPath(gpuAgentHostRoot).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("cdi").WithMountPath(gpuAgentHostRoot+gpuconfig.DefaultCDISpecDir),
		)
	pod := corev1ac.PodSpec().
		WithServiceAccountName(GPUAgentName).
		WithPriorityClassName("system-node-critical").
		WithNodeSelector(map[string]string{gpuAgentPoolLabel: o.Pool}).
		WithTolerations(corev1ac.Toleration().WithOperator(corev1.TolerationOpExists)).
		WithContainers(container).
		WithVolumes(
			corev1ac.Volume().WithName("config").WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(name)),
			hostPath("device-plugins", gpuconfig.DefaultPluginDir, corev1.HostPathDirectoryOrCreate),
			hostPath("pod-resources", "/var/lib/kubelet/pod-resources", corev1.HostPathDirectoryOrCreate),
			hostPath("host", "/", corev1.HostPathDirectory),
			hostPath("cdi", gpuconfig.DefaultCDISpecDir, corev1.HostPathDirectoryOrCreate),
		)
	return appsv1ac.DaemonSet(name, metav1.NamespaceSystem).WithLabels(labels).
		WithSpec(appsv1ac.DaemonSetSpec().
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(selector).
				WithAnnotations(map[string]string{"fke.dev/config-hash": hex.EncodeToString(sum[:8])}).
				WithSpec(pod)))
}
