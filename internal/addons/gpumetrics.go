package addons

import (
	"context"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/rest"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

// Names of the GPU metrics addon and its objects in the tenant.
const (
	GPUMetricsName = "gpu-metrics"
	// GPUMetricsBinary is the adapter's executable (cmd/fke-gpu-metrics),
	// built with fke and found beside it.
	GPUMetricsBinary = "fke-gpu-metrics"
	// GPUMetricsVersion is the version of sigs.k8s.io/custom-metrics-apiserver
	// the adapter is built on (go.mod).
	GPUMetricsVersion = "custom-metrics-apiserver v1.37.0"
	// GPUMetricsService is the ExternalName Service the APIService names.
	GPUMetricsService = "fke-gpu-metrics"
	// CustomMetricsAPIService is the APIService of the custom metrics API.
	CustomMetricsAPIService = "v1beta2.custom.metrics.k8s.io"
	// GPUMetricsClusterRole lets the adapter read the pods, nodes and
	// workloads it reports on.
	GPUMetricsClusterRole = "fke:gpu-metrics"
	// GPUMetricsReaderClusterRole is aggregated into view, edit and admin,
	// so that users who may read pods may read their GPU metrics.
	GPUMetricsReaderClusterRole = "fke:gpu-metrics-reader"
	// GPUMetricsAuthDelegator binds system:auth-delegator: the adapter
	// checks tokens and permissions of its callers with the API server.
	GPUMetricsAuthDelegator = "fke:gpu-metrics:system:auth-delegator"
)

// gpuMetricsAPI is how the adapter is run and reached: see aggregatedAPI.
var gpuMetricsAPI = aggregatedAPI{
	what: "GPU metrics", name: GPUMetricsName, binary: GPUMetricsBinary,
	port:        func(cl *fkev1.Cluster) int32 { return cl.Status.Ports.GPUMetrics },
	user:        pki.GPUMetricsUser,
	serving:     pki.GPUMetrics,
	client:      pki.GPUMetricsClient,
	serviceName: pki.GPUMetricsServiceName,
	service:     GPUMetricsService,
	apiService:  CustomMetricsAPIService, group: "custom.metrics.k8s.io", version: "v1beta2", versionPriority: 200,
	labels:        map[string]string{"app.kubernetes.io/managed-by": "fke", "app.kubernetes.io/name": GPUMetricsService},
	role:          GPUMetricsClusterRole,
	readerRole:    GPUMetricsReaderClusterRole,
	authDelegator: GPUMetricsAuthDelegator,
	rules: []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("pods", "nodes").WithVerbs("get", "list", "watch"),
		rbacv1ac.PolicyRule().WithAPIGroups("apps").WithResources("deployments", "replicasets", "statefulsets").WithVerbs("get", "list", "watch"),
	},
	readerRules: []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("custom.metrics.k8s.io").WithResources("*").WithVerbs("get", "list"),
	},
	kubeconfigFlag: "--lister-kubeconfig",
	args: []string{
		"--agent-namespace=" + metav1.NamespaceSystem,
		"--agent-selector=app.kubernetes.io/name=" + GPUAgentName,
		"--agent-port=" + strconv.Itoa(gpuAgentMetricsPort),
	},
}

// GPUMetrics is fke's GPU custom-metrics adapter (cmd/fke-gpu-metrics,
// internal/gpumetrics). It runs beside the control plane and serves
// custom.metrics.k8s.io/v1beta2 to the tenant's API server through its
// aggregation layer, as metrics-server does (see aggregatedAPI). It
// scrapes the GPU agents of local GPU nodes (their pod IPs, port 9400) and
// simulates the pods of annotated workloads elsewhere.
type GPUMetrics struct{}

var _ Managed = GPUMetrics{}

// Name implements Managed.
func (GPUMetrics) Name() string { return GPUMetricsName }

// Version implements Managed.
func (GPUMetrics) Version() string { return GPUMetricsVersion }

// Enabled implements Managed.
func (GPUMetrics) Enabled(cl *fkev1.Cluster) bool { return cl.Spec.Addons.GPUMetrics.IsEnabled() }

// Processes implements Managed: the one process of Process.
func (a GPUMetrics) Processes(cl *fkev1.Cluster, n controlplane.AddonNetwork, b pki.Bundle) ([]controlplane.Addon, error) {
	return one(a.Process(cl, n, b))
}

// Process returns the addon's process (see Managed.Processes).
func (GPUMetrics) Process(cl *fkev1.Cluster, n controlplane.AddonNetwork, b pki.Bundle) (controlplane.Addon, error) {
	return gpuMetricsAPI.process(cl, n, b)
}

// Install implements Managed: the ExternalName Service, the APIService and
// the RBAC of the adapter, by server-side apply.
func (GPUMetrics) Install(ctx context.Context, cfg *rest.Config, cl *fkev1.Cluster, b pki.Bundle, n controlplane.AddonNetwork) error {
	return gpuMetricsAPI.install(ctx, cfg, cl, b, n)
}

// Serving implements Managed: the APIService's Available condition.
func (GPUMetrics) Serving(ctx context.Context, cfg *rest.Config) (bool, string, error) {
	return gpuMetricsAPI.servingAPI(ctx, cfg)
}

// Remove implements Managed: the APIService first (the API stops being
// advertised, so HPAs report the metrics unavailable), then the Service
// and the RBAC.
func (GPUMetrics) Remove(ctx context.Context, cfg *rest.Config) error {
	return gpuMetricsAPI.remove(ctx, cfg)
}
