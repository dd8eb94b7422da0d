package addons

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregv1ac "k8s.io/kube-aggregator/pkg/client/applyconfiguration/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

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

// Files of the adapter process (in its controlplane.Addon directory).
const (
	gmKubeconfig   = "kubeconfig"
	gmCA           = "ca.crt"
	gmFrontProxyCA = "front-proxy-ca.crt"
	gmServingCert  = "tls.crt"
	gmServingKey   = "tls.key"
)

// GPUMetrics is fke's GPU custom-metrics adapter (cmd/fke-gpu-metrics,
// internal/gpumetrics). It runs beside the control plane on a loopback
// port and serves custom.metrics.k8s.io/v1beta2 to the tenant's API server
// through its aggregation layer, reached as metrics-server is (see
// MetricsServer): an ExternalName Service to 127.0.0.1, TLS with a serving
// certificate of the cluster CA for fke-gpu-metrics.kube-system.svc, the
// aggregator authenticated by the front-proxy CA and other callers by the
// cluster CA or by token, every request authorized by the API server. It
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
func (a GPUMetrics) Processes(cl *fkev1.Cluster, endpoint string, b pki.Bundle) ([]controlplane.Addon, error) {
	return one(a.Process(cl, endpoint, b))
}

// Process returns the addon's process (see Managed.Processes).
func (GPUMetrics) Process(cl *fkev1.Cluster, endpoint string, b pki.Bundle) (controlplane.Addon, error) {
	port := int(cl.Status.Ports.GPUMetrics)
	if port == 0 {
		return controlplane.Addon{}, errors.New("no port allocated for the GPU metrics adapter")
	}
	for _, f := range []string{pki.CACertFile, pki.FrontProxyCACertFile, pki.GPUMetricsCertFile, pki.GPUMetricsKeyFile,
		pki.GPUMetricsClientCertFile, pki.GPUMetricsClientKeyFile} {
		if len(b[f]) == 0 {
			return controlplane.Addon{}, fmt.Errorf("the cluster's PKI has no %s", f)
		}
	}
	kc, err := pki.Kubeconfig(cl.Name, endpoint, b[pki.CACertFile], b[pki.GPUMetricsClientCertFile],
		b[pki.GPUMetricsClientKeyFile], pki.GPUMetricsUser)
	if err != nil {
		return controlplane.Addon{}, fmt.Errorf("GPU metrics kubeconfig: %w", err)
	}
	file := func(name string) string { return controlplane.AddonDirVar + "/" + name }
	return controlplane.Addon{
		Name:   GPUMetricsName,
		Binary: GPUMetricsBinary,
		Files: map[string][]byte{
			gmKubeconfig:   kc,
			gmCA:           b[pki.CACertFile],
			gmFrontProxyCA: b[pki.FrontProxyCACertFile],
			gmServingCert:  b[pki.GPUMetricsCertFile],
			gmServingKey:   b[pki.GPUMetricsKeyFile],
		},
		Args: []string{
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + file(gmServingCert),
			"--tls-private-key-file=" + file(gmServingKey),
			"--lister-kubeconfig=" + file(gmKubeconfig),
			"--authentication-kubeconfig=" + file(gmKubeconfig),
			"--authorization-kubeconfig=" + file(gmKubeconfig),
			// Both CAs as files: nothing is read from the cluster's
			// extension-apiserver-authentication ConfigMap.
			"--client-ca-file=" + file(gmCA),
			"--requestheader-client-ca-file=" + file(gmFrontProxyCA),
			"--requestheader-allowed-names=front-proxy-client",
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--profiling=false",
			"--agent-namespace=" + metav1.NamespaceSystem,
			"--agent-selector=app.kubernetes.io/name=" + GPUAgentName,
			"--agent-port=" + strconv.Itoa(gpuAgentMetricsPort),
		},
		HealthURL:        "https://127.0.0.1:" + strconv.Itoa(port) + "/livez",
		HealthCA:         b[pki.CACertFile],
		HealthServerName: pki.GPUMetricsServiceName,
	}, nil
}

// Install implements Managed: the ExternalName Service, the APIService and
// the RBAC of the adapter, by server-side apply.
func (GPUMetrics) Install(ctx context.Context, cfg *rest.Config, cl *fkev1.Cluster, b pki.Bundle) error {
	port := cl.Status.Ports.GPUMetrics
	if port == 0 {
		return errors.New("GPU metrics: no port allocated")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("GPU metrics: tenant client: %w", err)
	}
	ag, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("GPU metrics: tenant aggregator client: %w", err)
	}
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	const ns = metav1.NamespaceSystem
	labels := map[string]string{"app.kubernetes.io/managed-by": "fke", "app.kubernetes.io/name": GPUMetricsService}
	clusterRole := func(name string) *rbacv1ac.RoleRefApplyConfiguration {
		return rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(name)
	}
	user := rbacv1ac.Subject().WithKind("User").WithAPIGroup("rbac.authorization.k8s.io").WithName(pki.GPUMetricsUser)
	steps := []struct {
		what string
		do   func() error
	}{
		{"ClusterRole " + GPUMetricsClusterRole, func() error {
			_, err := cs.RbacV1().ClusterRoles().Apply(ctx, rbacv1ac.ClusterRole(GPUMetricsClusterRole).WithLabels(labels).WithRules(
				rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("pods", "nodes").WithVerbs("get", "list", "watch"),
				rbacv1ac.PolicyRule().WithAPIGroups("apps").WithResources("deployments", "replicasets", "statefulsets").WithVerbs("get", "list", "watch"),
			), apply)
			return err
		}},
		{"ClusterRole " + GPUMetricsReaderClusterRole, func() error {
			_, err := cs.RbacV1().ClusterRoles().Apply(ctx, rbacv1ac.ClusterRole(GPUMetricsReaderClusterRole).WithLabels(labels).
				WithLabels(map[string]string{
					"rbac.authorization.k8s.io/aggregate-to-admin": "true",
					"rbac.authorization.k8s.io/aggregate-to-edit":  "true",
					"rbac.authorization.k8s.io/aggregate-to-view":  "true",
				}).WithRules(
				rbacv1ac.PolicyRule().WithAPIGroups("custom.metrics.k8s.io").WithResources("*").WithVerbs("get", "list"),
			), apply)
			return err
		}},
		{"ClusterRoleBinding " + GPUMetricsClusterRole, func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, rbacv1ac.ClusterRoleBinding(GPUMetricsClusterRole).WithLabels(labels).
				WithRoleRef(clusterRole(GPUMetricsClusterRole)).WithSubjects(user), apply)
			return err
		}},
		{"ClusterRoleBinding " + GPUMetricsAuthDelegator, func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, rbacv1ac.ClusterRoleBinding(GPUMetricsAuthDelegator).WithLabels(labels).
				WithRoleRef(clusterRole("system:auth-delegator")).WithSubjects(user), apply)
			return err
		}},
		{"Service " + GPUMetricsService, func() error {
			_, err := cs.CoreV1().Services(ns).Apply(ctx, corev1ac.Service(GPUMetricsService, ns).WithLabels(labels).
				WithSpec(corev1ac.ServiceSpec().WithType(corev1.ServiceTypeExternalName).WithExternalName("127.0.0.1").
					WithPorts(corev1ac.ServicePort().WithName("https").WithProtocol(corev1.ProtocolTCP).WithPort(port))), apply)
			return err
		}},
		{"APIService " + CustomMetricsAPIService, func() error {
			_, err := ag.ApiregistrationV1().APIServices().Apply(ctx, apiregv1ac.APIService(CustomMetricsAPIService).WithLabels(labels).
				WithSpec(apiregv1ac.APIServiceSpec().WithGroup("custom.metrics.k8s.io").WithVersion("v1beta2").
					WithService(apiregv1ac.ServiceReference().WithNamespace(ns).WithName(GPUMetricsService).WithPort(port)).
					WithCABundle(b[pki.CACertFile]...).WithInsecureSkipTLSVerify(false).
					WithGroupPriorityMinimum(100).WithVersionPriority(200)), apply)
			return err
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("GPU metrics: applying %s: %w", s.what, err)
		}
	}
	return nil
}

// Serving implements Managed: the APIService's Available condition.
func (GPUMetrics) Serving(ctx context.Context, cfg *rest.Config) (bool, string, error) {
	ag, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return false, "", fmt.Errorf("GPU metrics: tenant aggregator client: %w", err)
	}
	svc, err := ag.ApiregistrationV1().APIServices().Get(ctx, CustomMetricsAPIService, metav1.GetOptions{})
	if err != nil {
		return false, "", fmt.Errorf("GPU metrics: getting APIService %s: %w", CustomMetricsAPIService, err)
	}
	ok, why := apiServiceAvailable(svc)
	return ok, why, nil
}

// Remove implements Managed: the APIService first (the API stops being
// advertised, so HPAs report the metrics unavailable), then the Service
// and the RBAC.
func (GPUMetrics) Remove(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("GPU metrics: tenant client: %w", err)
	}
	ag, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("GPU metrics: tenant aggregator client: %w", err)
	}
	del := metav1.DeleteOptions{}
	steps := []struct {
		what string
		do   func() error
	}{
		{"APIService " + CustomMetricsAPIService, func() error {
			return ag.ApiregistrationV1().APIServices().Delete(ctx, CustomMetricsAPIService, del)
		}},
		{"Service " + GPUMetricsService, func() error {
			return cs.CoreV1().Services(metav1.NamespaceSystem).Delete(ctx, GPUMetricsService, del)
		}},
		{"ClusterRoleBinding " + GPUMetricsAuthDelegator, func() error {
			return cs.RbacV1().ClusterRoleBindings().Delete(ctx, GPUMetricsAuthDelegator, del)
		}},
		{"ClusterRoleBinding " + GPUMetricsClusterRole, func() error {
			return cs.RbacV1().ClusterRoleBindings().Delete(ctx, GPUMetricsClusterRole, del)
		}},
		{"ClusterRole " + GPUMetricsClusterRole, func() error {
			return cs.RbacV1().ClusterRoles().Delete(ctx, GPUMetricsClusterRole, del)
		}},
		{"ClusterRole " + GPUMetricsReaderClusterRole, func() error {
			return cs.RbacV1().ClusterRoles().Delete(ctx, GPUMetricsReaderClusterRole, del)
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("GPU metrics: deleting %s: %w", s.what, err)
		}
	}
	return nil
}
