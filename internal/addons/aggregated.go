package addons

import (
	"context"
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

// Files of an aggregated API server's process (in its controlplane.Addon
// directory).
const (
	aggKubeconfig   = "kubeconfig"
	aggCA           = "ca.crt"
	aggFrontProxyCA = "front-proxy-ca.crt"
	aggServingCert  = "tls.crt"
	aggServingKey   = "tls.key"
)

// aggregatedAPI describes an addon that serves an API group to the
// tenant's API server through its aggregation layer from a process beside
// the control plane (metrics-server, the GPU metrics adapter). The process
// listens where the runtime's AddonNetwork says (a loopback port beside a
// local API server, every address of its pod in a management cluster); the
// APIService names a Service of type ExternalName whose name is the host
// at which the API server reaches it (127.0.0.1, or the Service of its
// pods in the management cluster), which the aggregator dials as is
// (EndpointSlices may not hold loopback addresses; an ExternalName Service
// has none, so none is needed). TLS both ways: the serving certificate is
// signed by the cluster CA (the APIService's caBundle) for serviceName, the
// name the aggregator checks; the process authenticates the aggregator by
// the front-proxy CA and other callers by the cluster CA or by token, and
// has every request authorized by the API server (SubjectAccessReview,
// hence the auth-delegator binding).
type aggregatedAPI struct {
	// what names the addon in errors.
	what string
	// name is the process's name, binary its executable.
	name, binary string
	// port is the cluster's port of the process (0: none yet).
	port func(*fkev1.Cluster) int32
	// user is the process's identity; serving and client are the PKI base
	// names of its serving and client certificates.
	user, serving, client string
	// serviceName is the name the serving certificate holds:
	// <service>.kube-system.svc.
	serviceName string
	// service is the ExternalName Service in kube-system.
	service string
	// apiService is the APIService of group/version.
	apiService, group, version string
	versionPriority            int32
	labels                     map[string]string
	// role is granted to user; readerRole, aggregated into view, edit and
	// admin, lets users who may read pods read the API; authDelegator binds
	// system:auth-delegator to user.
	role, readerRole, authDelegator string
	rules, readerRules              []*rbacv1ac.PolicyRuleApplyConfiguration
	// kubeconfigFlag is the flag that takes the process's kubeconfig for
	// the objects it reads (the authentication and authorization flags
	// take it too).
	kubeconfigFlag string
	// args are the process's own arguments.
	args []string
}

// process returns the addon's process for cl, connected as n says, with
// PKI b.
func (a aggregatedAPI) process(cl *fkev1.Cluster, n controlplane.AddonNetwork, b pki.Bundle) (controlplane.Addon, error) {
	port := int(a.port(cl))
	if port == 0 {
		return controlplane.Addon{}, fmt.Errorf("no port allocated for %s", a.what)
	}
	for _, f := range []string{pki.CACertFile, pki.FrontProxyCACertFile, pki.CertFile(a.serving), pki.KeyFile(a.serving),
		pki.CertFile(a.client), pki.KeyFile(a.client)} {
		if len(b[f]) == 0 {
			return controlplane.Addon{}, fmt.Errorf("the cluster's PKI has no %s", f)
		}
	}
	kc, err := pki.Kubeconfig(cl.Name, n.APIServer, b[pki.CACertFile], b[pki.CertFile(a.client)], b[pki.KeyFile(a.client)], a.user)
	if err != nil {
		return controlplane.Addon{}, fmt.Errorf("%s kubeconfig: %w", a.what, err)
	}
	file := func(name string) string { return controlplane.AddonDirVar + "/" + name }
	args := []string{
		"--bind-address=" + controlplane.AddonBindVar,
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + file(aggServingCert),
		"--tls-private-key-file=" + file(aggServingKey),
		a.kubeconfigFlag + "=" + file(aggKubeconfig),
		"--authentication-kubeconfig=" + file(aggKubeconfig),
		"--authorization-kubeconfig=" + file(aggKubeconfig),
		// Both CAs as files: nothing is read from the cluster's
		// extension-apiserver-authentication ConfigMap.
		"--client-ca-file=" + file(aggCA),
		"--requestheader-client-ca-file=" + file(aggFrontProxyCA),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--profiling=false",
	}
	return controlplane.Addon{
		Name:   a.name,
		Binary: a.binary,
		Files: map[string][]byte{
			aggKubeconfig:   kc,
			aggCA:           b[pki.CACertFile],
			aggFrontProxyCA: b[pki.FrontProxyCACertFile],
			aggServingCert:  b[pki.CertFile(a.serving)],
			aggServingKey:   b[pki.KeyFile(a.serving)],
		},
		Args:             append(args, a.args...),
		Port:             int32(port),
		HealthURL:        "https://127.0.0.1:" + strconv.Itoa(port) + "/livez",
		HealthCA:         b[pki.CACertFile],
		HealthServerName: a.serviceName,
	}, nil
}

// install applies the RBAC, the ExternalName Service (to the process on
// n) and the APIService, by server-side apply.
func (a aggregatedAPI) install(ctx context.Context, cfg *rest.Config, cl *fkev1.Cluster, b pki.Bundle, n controlplane.AddonNetwork) error {
	port := a.port(cl)
	if port == 0 {
		return fmt.Errorf("%s: no port allocated", a.what)
	}
	cs, ag, err := a.clients(cfg)
	if err != nil {
		return err
	}
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	const ns = metav1.NamespaceSystem
	clusterRole := func(name string) *rbacv1ac.RoleRefApplyConfiguration {
		return rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(name)
	}
	user := rbacv1ac.Subject().WithKind("User").WithAPIGroup("rbac.authorization.k8s.io").WithName(a.user)
	steps := []struct {
		what string
		do   func() error
	}{
		{"ClusterRole " + a.role, func() error {
			_, err := cs.RbacV1().ClusterRoles().Apply(ctx, rbacv1ac.ClusterRole(a.role).WithLabels(a.labels).WithRules(a.rules...), apply)
			return err
		}},
		{"ClusterRole " + a.readerRole, func() error {
			_, err := cs.RbacV1().ClusterRoles().Apply(ctx, rbacv1ac.ClusterRole(a.readerRole).WithLabels(a.labels).
				WithLabels(map[string]string{
					"rbac.authorization.k8s.io/aggregate-to-admin": "true",
					"rbac.authorization.k8s.io/aggregate-to-edit":  "true",
					"rbac.authorization.k8s.io/aggregate-to-view":  "true",
				}).WithRules(a.readerRules...), apply)
			return err
		}},
		{"ClusterRoleBinding " + a.role, func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, rbacv1ac.ClusterRoleBinding(a.role).WithLabels(a.labels).
				WithRoleRef(clusterRole(a.role)).WithSubjects(user), apply)
			return err
		}},
		{"ClusterRoleBinding " + a.authDelegator, func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, rbacv1ac.ClusterRoleBinding(a.authDelegator).WithLabels(a.labels).
				WithRoleRef(clusterRole("system:auth-delegator")).WithSubjects(user), apply)
			return err
		}},
		{"Service " + a.service, func() error {
			// ExternalName: the aggregator dials <externalName>:<APIService
			// port>, where the runtime runs the process.
			_, err := cs.CoreV1().Services(ns).Apply(ctx, corev1ac.Service(a.service, ns).WithLabels(a.labels).
				WithSpec(corev1ac.ServiceSpec().WithType(corev1.ServiceTypeExternalName).WithExternalName(n.Host(a.name)).
					WithPorts(corev1ac.ServicePort().WithName("https").WithProtocol(corev1.ProtocolTCP).WithPort(port))), apply)
			return err
		}},
		{"APIService " + a.apiService, func() error {
			_, err := ag.ApiregistrationV1().APIServices().Apply(ctx, apiregv1ac.APIService(a.apiService).WithLabels(a.labels).
				WithSpec(apiregv1ac.APIServiceSpec().WithGroup(a.group).WithVersion(a.version).
					WithService(apiregv1ac.ServiceReference().WithNamespace(ns).WithName(a.service).WithPort(port)).
					WithCABundle(b[pki.CACertFile]...).WithInsecureSkipTLSVerify(false).
					WithGroupPriorityMinimum(100).WithVersionPriority(a.versionPriority)), apply)
			return err
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: applying %s: %w", a.what, s.what, err)
		}
	}
	return nil
}

// servingAPI reports the APIService's Available condition.
func (a aggregatedAPI) servingAPI(ctx context.Context, cfg *rest.Config) (bool, string, error) {
	ag, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return false, "", fmt.Errorf("%s: tenant aggregator client: %w", a.what, err)
	}
	svc, err := ag.ApiregistrationV1().APIServices().Get(ctx, a.apiService, metav1.GetOptions{})
	if err != nil {
		return false, "", fmt.Errorf("%s: getting APIService %s: %w", a.what, a.apiService, err)
	}
	ok, why := apiServiceAvailable(svc)
	return ok, why, nil
}

// remove deletes the APIService first (the API stops being advertised),
// then the Service and the RBAC. Objects already gone are no error.
func (a aggregatedAPI) remove(ctx context.Context, cfg *rest.Config) error {
	cs, ag, err := a.clients(cfg)
	if err != nil {
		return err
	}
	del := metav1.DeleteOptions{}
	steps := []struct {
		what string
		do   func() error
	}{
		{"APIService " + a.apiService, func() error { return ag.ApiregistrationV1().APIServices().Delete(ctx, a.apiService, del) }},
		{"Service " + a.service, func() error {
			return cs.CoreV1().Services(metav1.NamespaceSystem).Delete(ctx, a.service, del)
		}},
		{"ClusterRoleBinding " + a.authDelegator, func() error {
			return cs.RbacV1().ClusterRoleBindings().Delete(ctx, a.authDelegator, del)
		}},
		{"ClusterRoleBinding " + a.role, func() error { return cs.RbacV1().ClusterRoleBindings().Delete(ctx, a.role, del) }},
		{"ClusterRole " + a.role, func() error { return cs.RbacV1().ClusterRoles().Delete(ctx, a.role, del) }},
		{"ClusterRole " + a.readerRole, func() error { return cs.RbacV1().ClusterRoles().Delete(ctx, a.readerRole, del) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: deleting %s: %w", a.what, s.what, err)
		}
	}
	return nil
}

func (a aggregatedAPI) clients(cfg *rest.Config) (kubernetes.Interface, aggregator.Interface, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: tenant client: %w", a.what, err)
	}
	ag, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: tenant aggregator client: %w", a.what, err)
	}
	return cs, ag, nil
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
