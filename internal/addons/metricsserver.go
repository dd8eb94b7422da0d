package addons

import (
	"context"

	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/rest"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

// Names of the metrics-server addon and its objects in the tenant (as
// upstream's manifests name them, so tools that look for them find them).
const (
	MetricsServerName = "metrics-server"
	// MetricsServerVersion is the sigs.k8s.io/metrics-server version fke runs
	// (pinned in hack/k8s/metrics-server).
	MetricsServerVersion = "v0.8.0"
	// MetricsAPIService is the APIService of the resource metrics API.
	MetricsAPIService = "v1beta1.metrics.k8s.io"
	// MetricsServerClusterRole lets metrics-server read nodes, pods and the
	// kubelets' resource metrics.
	MetricsServerClusterRole = "system:metrics-server"
	// MetricsReaderClusterRole is aggregated into view, edit and admin, so
	// that users who may read pods may read their metrics.
	MetricsReaderClusterRole = "system:aggregated-metrics-reader"
	// MetricsServerAuthDelegator binds system:auth-delegator: metrics-server
	// checks tokens and permissions of its callers with the API server.
	MetricsServerAuthDelegator = "metrics-server:system:auth-delegator"
	// MetricResolution is how often metrics-server scrapes the kubelets, as
	// upstream's manifests set it.
	MetricResolution = "15s"
)

// metricsServerAPI is how metrics-server is run and reached: see
// aggregatedAPI. It scrapes the kubelets' /metrics/resource with its own
// client certificate and checks their serving certificates against the
// cluster CA.
var metricsServerAPI = aggregatedAPI{
	what: MetricsServerName, name: MetricsServerName, binary: MetricsServerName,
	port:        func(cl *fkev1.Cluster) int32 { return cl.Status.Ports.MetricsServer },
	user:        pki.MetricsServerUser,
	serving:     pki.MetricsServer,
	client:      pki.MetricsServerClient,
	serviceName: pki.MetricsServerServiceName,
	service:     MetricsServerName,
	apiService:  MetricsAPIService, group: "metrics.k8s.io", version: "v1beta1", versionPriority: 100,
	labels:        map[string]string{"app.kubernetes.io/managed-by": "fke", "k8s-app": MetricsServerName},
	role:          MetricsServerClusterRole,
	readerRole:    MetricsReaderClusterRole,
	authDelegator: MetricsServerAuthDelegator,
	rules: []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("nodes/metrics").WithVerbs("get"),
		rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("pods", "nodes").WithVerbs("get", "list", "watch"),
	},
	readerRules: []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("metrics.k8s.io").WithResources("pods", "nodes").WithVerbs("get", "list", "watch"),
	},
	kubeconfigFlag: "--kubeconfig",
	args: []string{
		"--kubelet-certificate-authority=" + controlplane.AddonDirVar + "/" + aggCA,
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--kubelet-use-node-status-port",
		"--metric-resolution=" + MetricResolution,
	},
}

// MetricsServer is the metrics-server addon (sigs.k8s.io/metrics-server),
// serving the resource metrics API (metrics.k8s.io/v1beta1) from beside
// the control plane (see aggregatedAPI and metricsServerAPI).
type MetricsServer struct{}

var _ Managed = MetricsServer{}

// Name implements Managed.
func (MetricsServer) Name() string { return MetricsServerName }

// Version implements Managed.
func (MetricsServer) Version() string { return MetricsServerVersion }

// Enabled implements Managed.
func (MetricsServer) Enabled(cl *fkev1.Cluster) bool { return cl.Spec.Addons.MetricsServer.IsEnabled() }

// Processes implements Managed: the one process of Process.
func (a MetricsServer) Processes(cl *fkev1.Cluster, n controlplane.AddonNetwork, b pki.Bundle) ([]controlplane.Addon, error) {
	return one(a.Process(cl, n, b))
}

// Process returns the addon's process (see Managed.Processes).
func (MetricsServer) Process(cl *fkev1.Cluster, n controlplane.AddonNetwork, b pki.Bundle) (controlplane.Addon, error) {
	return metricsServerAPI.process(cl, n, b)
}

// Install implements Managed: the ExternalName Service, the APIService and
// the RBAC of metrics-server, by server-side apply.
func (MetricsServer) Install(ctx context.Context, cfg *rest.Config, cl *fkev1.Cluster, b pki.Bundle, n controlplane.AddonNetwork) error {
	return metricsServerAPI.install(ctx, cfg, cl, b, n)
}

// Serving implements Managed: the APIService's Available condition.
func (MetricsServer) Serving(ctx context.Context, cfg *rest.Config) (bool, string, error) {
	return metricsServerAPI.servingAPI(ctx, cfg)
}

// Remove implements Managed: the APIService first (the API stops being
// advertised), then the Service and the RBAC.
func (MetricsServer) Remove(ctx context.Context, cfg *rest.Config) error {
	return metricsServerAPI.remove(ctx, cfg)
}
