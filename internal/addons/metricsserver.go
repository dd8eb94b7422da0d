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
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregv1ac "k8s.io/kube-aggregator/pkg/client/applyconfiguration/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

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

// Files of the metrics-server process (in its controlplane.Addon directory).
const (
	msKubeconfig   = "kubeconfig"
	msCA           = "ca.crt"
	msFrontProxyCA = "front-proxy-ca.crt"
	msServingCert  = "tls.crt"
	msServingKey   = "tls.key"
)

// MetricsServer is the metrics-server addon (sigs.k8s.io/metrics-server).
// It runs beside the control plane on a loopback port and serves the
// resource metrics API (metrics.k8s.io/v1beta1) to the tenant's API server
// through its aggregation layer: the APIService names a Service of type
// ExternalName whose name is 127.0.0.1, which the aggregator dials as is
// (EndpointSlices may not hold loopback addresses; an ExternalName Service
// has none, so none is needed). TLS both ways: metrics-server's serving
// certificate is signed by the cluster CA (the APIService's caBundle) for
// metrics-server.kube-system.svc, the name the aggregator checks, and it
// authenticates the aggregator by the front-proxy CA and other callers by
// the cluster CA or by token; every request is authorized by the API
// server (SubjectAccessReview). It scrapes the kubelets' /metrics/resource
// with its own client certificate and checks their serving certificates
// against the cluster CA.
type MetricsServer struct{}

var _ Managed = MetricsServer{}

// Name implements Managed.
func (MetricsServer) Name() string { return MetricsServerName }

// Version implements Managed.
func (MetricsServer) Version() string { return MetricsServerVersion }

// Enabled implements Managed.
func (MetricsServer) Enabled(cl *fkev1.Cluster) bool { return cl.Spec.Addons.MetricsServer.IsEnabled() }

// Processes implements Managed: the one process of Process.
func (a MetricsServer) Processes(cl *fkev1.Cluster, endpoint string, b pki.Bundle) ([]controlplane.Addon, error) {
	return one(a.Process(cl, endpoint, b))
}

// Process returns the addon's process (see Managed.Processes).
func (MetricsServer) Process(cl *fkev1.Cluster, endpoint string, b pki.Bundle) (controlplane.Addon, error) {
	port := int(cl.Status.Ports.MetricsServer)
	if port == 0 {
		return controlplane.Addon{}, errors.New("no port allocated for metrics-server")
	}
	for _, f := range []string{pki.CACertFile, pki.FrontProxyCACertFile, pki.MetricsServerCertFile, pki.MetricsServerKeyFile,
		pki.MetricsServerClientCertFile, pki.MetricsServerClientKeyFile} {
		if len(b[f]) == 0 {
			return controlplane.Addon{}, fmt.Errorf("the cluster's PKI has no %s", f)
		}
	}
	kc, err := pki.Kubeconfig(cl.Name, endpoint, b[pki.CACertFile], b[pki.MetricsServerClientCertFile],
		b[pki.MetricsServerClientKeyFile], pki.MetricsServerUser)
	if err != nil {
		return controlplane.Addon{}, fmt.Errorf("metrics-server kubeconfig: %w", err)
	}
	file := func(name string) string { return controlplane.AddonDirVar + "/" + name }
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return controlplane.Addon{
		Name:   MetricsServerName,
		Binary: MetricsServerName,
		Files: map[string][]byte{
			msKubeconfig:   kc,
			msCA:           b[pki.CACertFile],
			msFrontProxyCA: b[pki.FrontProxyCACertFile],
			msServingCert:  b[pki.MetricsServerCertFile],
			msServingKey:   b[pki.MetricsServerKeyFile],
		},
		Args: []string{
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + file(msServingCert),
			"--tls-private-key-file=" + file(msServingKey),
			"--kubeconfig=" + file(msKubeconfig),
			"--authentication-kubeconfig=" + file(msKubeconfig),
			"--authorization-kubeconfig=" + file(msKubeconfig),
			// Both CAs as files: nothing is read from the cluster's
			// extension-apiserver-authentication ConfigMap.
			"--client-ca-file=" + file(msCA),
			"--requestheader-client-ca-file=" + file(msFrontProxyCA),
			"--requestheader-allowed-names=front-proxy-client",
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--kubelet-certificate-authority=" + file(msCA),
			"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
			"--kubelet-use-node-status-port",
			"--metric-resolution=" + MetricResolution,
			"--profiling=false",
		},
		HealthURL:        "https://" + addr + "/livez",
		HealthCA:         b[pki.CACertFile],
		HealthServerName: pki.MetricsServerServiceName,
	}, nil
}

// Install implements Managed: the ExternalName Service, the APIService and
// the RBAC of metrics-server, by server-side apply.
func (MetricsServer) Install(ctx context.Context, cfg *rest.Config, cl *fkev1.Cluster, b pki.Bundle) error {
	port := cl.Status.Ports.MetricsServer
	if port == 0 {
		return errors.New("metrics-server: no port allocated")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("metrics-server: tenant client: %w", err)
	}
	ag, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("metrics-server: tenant aggregator client: %w", err)
	}
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	const ns = metav1.NamespaceSystem
	labels := map[string]string{"app.kubernetes.io/managed-by": "fke", "k8s-app": MetricsServerName}
	clusterRole := func(name string) *rbacv1ac.RoleRefApplyConfiguration {
		return rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(name)
	}
	user := rbacv1ac.Subject().WithKind("User").WithAPIGroup("rbac.authorization.k8s.io").WithName(pki.MetricsServerUser)
	steps := []struct {
		what string
		do   func() error
	}{
		{"ClusterRole " + MetricsServerClusterRole, func() error {
			_, err := cs.RbacV1().ClusterRoles().Apply(ctx, rbacv1ac.ClusterRole(MetricsServerClusterRole).WithLabels(labels).WithRules(
				rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("nodes/metrics").WithVerbs("get"),
				rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("pods", "nodes").WithVerbs("get", "list", "watch"),
			), apply)
			return err
		}},
		{"ClusterRole " + MetricsReaderClusterRole, func() error {
			_, err := cs.RbacV1().ClusterRoles().Apply(ctx, rbacv1ac.ClusterRole(MetricsReaderClusterRole).WithLabels(labels).
				WithLabels(map[string]string{
					"rbac.authorization.k8s.io/aggregate-to-admin": "true",
					"rbac.authorization.k8s.io/aggregate-to-edit":  "true",
					"rbac.authorization.k8s.io/aggregate-to-view":  "true",
				}).WithRules(
				rbacv1ac.PolicyRule().WithAPIGroups("metrics.k8s.io").WithResources("pods", "nodes").WithVerbs("get", "list", "watch"),
			), apply)
			return err
		}},
		{"ClusterRoleBinding " + MetricsServerClusterRole, func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, rbacv1ac.ClusterRoleBinding(MetricsServerClusterRole).WithLabels(labels).
				WithRoleRef(clusterRole(MetricsServerClusterRole)).WithSubjects(user), apply)
			return err
		}},
		{"ClusterRoleBinding " + MetricsServerAuthDelegator, func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, rbacv1ac.ClusterRoleBinding(MetricsServerAuthDelegator).WithLabels(labels).
				WithRoleRef(clusterRole("system:auth-delegator")).WithSubjects(user), apply)
			return err
		}},
		{"Service " + MetricsServerName, func() error {
			// ExternalName: the aggregator dials <externalName>:<APIService
			// port>, here metrics-server's loopback address beside the API server.
			_, err := cs.CoreV1().Services(ns).Apply(ctx, corev1ac.Service(MetricsServerName, ns).WithLabels(labels).
				WithSpec(corev1ac.ServiceSpec().WithType(corev1.ServiceTypeExternalName).WithExternalName("127.0.0.1").
					WithPorts(corev1ac.ServicePort().WithName("https").WithProtocol(corev1.ProtocolTCP).WithPort(port))), apply)
			return err
		}},
		{"APIService " + MetricsAPIService, func() error {
			_, err := ag.ApiregistrationV1().APIServices().Apply(ctx, apiregv1ac.APIService(MetricsAPIService).WithLabels(labels).
				WithSpec(apiregv1ac.APIServiceSpec().WithGroup("metrics.k8s.io").WithVersion("v1beta1").
					WithService(apiregv1ac.ServiceReference().WithNamespace(ns).WithName(MetricsServerName).WithPort(port)).
					WithCABundle(b[pki.CACertFile]...).WithInsecureSkipTLSVerify(false).
					WithGroupPriorityMinimum(100).WithVersionPriority(100)), apply)
			return err
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("metrics-server: applying %s: %w", s.what, err)
		}
	}
	return nil
}

// Serving implements Managed: the APIService's Available condition.
func (MetricsServer) Serving(ctx context.Context, cfg *rest.Config) (bool, string, error) {
	ag, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return false, "", fmt.Errorf("metrics-server: tenant aggregator client: %w", err)
	}
	svc, err := ag.ApiregistrationV1().APIServices().Get(ctx, MetricsAPIService, metav1.GetOptions{})
	if err != nil {
		return false, "", fmt.Errorf("metrics-server: getting APIService %s: %w", MetricsAPIService, err)
	}
	ok, why := apiServiceAvailable(svc)
	return ok, why, nil
}

// apiServiceAvailable reads an APIService's Available condition.
func apiServiceAvailable(svc *apiregv1.APIService) (bool, string) {
	for _, c := range svc.Status.Conditions {
		if c.Type != apiregv1.Available {
			continue
		}
		if c.Status == apiregv1.ConditionTrue {
			return true, "serves " + svc.Name
		}
		return false, fmt.Sprintf("APIService %s not available: %s: %s", svc.Name, c.Reason, c.Message)
	}
	return false, fmt.Sprintf("APIService %s not checked by the API server yet", svc.Name)
}

// Remove implements Managed: the APIService first (the API stops being
// advertised), then the Service and the RBAC.
func (MetricsServer) Remove(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("metrics-server: tenant client: %w", err)
	}
	ag, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("metrics-server: tenant aggregator client: %w", err)
	}
	del := metav1.DeleteOptions{}
	steps := []struct {
		what string
		do   func() error
	}{
		{"APIService " + MetricsAPIService, func() error {
			return ag.ApiregistrationV1().APIServices().Delete(ctx, MetricsAPIService, del)
		}},
		{"Service " + MetricsServerName, func() error {
			return cs.CoreV1().Services(metav1.NamespaceSystem).Delete(ctx, MetricsServerName, del)
		}},
		{"ClusterRoleBinding " + MetricsServerAuthDelegator, func() error {
			return cs.RbacV1().ClusterRoleBindings().Delete(ctx, MetricsServerAuthDelegator, del)
		}},
		{"ClusterRoleBinding " + MetricsServerClusterRole, func() error {
			return cs.RbacV1().ClusterRoleBindings().Delete(ctx, MetricsServerClusterRole, del)
		}},
		{"ClusterRole " + MetricsServerClusterRole, func() error {
			return cs.RbacV1().ClusterRoles().Delete(ctx, MetricsServerClusterRole, del)
		}},
		{"ClusterRole " + MetricsReaderClusterRole, func() error {
			return cs.RbacV1().ClusterRoles().Delete(ctx, MetricsReaderClusterRole, del)
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("metrics-server: deleting %s: %w", s.what, err)
		}
	}
	return nil
}
