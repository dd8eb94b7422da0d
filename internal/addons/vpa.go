package addons

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	fkev1 "fke.dev/fke/api/v1alpha1"
	tenantcrd "fke.dev/fke/config/tenant"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

// Names of the Vertical Pod Autoscaler addon, its process and its objects
// in the tenant (the webhook as upstream's admission controller names it).
const (
	VPAName = "vertical-pod-autoscaler"
	// VPAVersion is the k8s.io/autoscaler/vertical-pod-autoscaler version
	// fke runs (go.mod pins it; internal/vpa's tests check the two agree).
	VPAVersion = "v1.8.1"
	// VPABinary runs the recommender, the updater and the admission
	// controller in one process (cmd/fke-vpa), built with fke and found
	// beside it.
	VPABinary = "fke-vpa"
	// VPAWebhookConfig is the MutatingWebhookConfiguration through which
	// the API server sends new pods (and VPA objects) to the admission
	// controller; VPAWebhook is its one webhook.
	VPAWebhookConfig = "vpa-webhook-config"
	VPAWebhook       = "vpa.k8s.io"
	// VPAWebhookService is the ExternalName Service in kube-system the
	// webhook names (its serving certificate holds
	// pki.VPAWebhookServiceName).
	VPAWebhookService = "vpa-webhook"
	// VPAClusterRole is what the three components may do, bound to their
	// user (pki.VPAUser).
	VPAClusterRole = "fke:vertical-pod-autoscaler"
	// vpaStatusNamespace holds the admission controller's status Lease,
	// which the updater reads before it evicts.
	vpaStatusNamespace = metav1.NamespaceSystem
)

// VPA CRDs (config/tenant/crd, generated from the upstream types).
const (
	VPACRD           = "verticalpodautoscalers.autoscaling.k8s.io"
	VPACheckpointCRD = "verticalpodautoscalercheckpoints.autoscaling.k8s.io"
)

// Files of the VPA process (in its controlplane.Addon directory).
const (
	vpaKubeconfig  = "kubeconfig"
	vpaCA          = "ca.crt"
	vpaServingCert = "tls.crt"
	vpaServingKey  = "tls.key"
)

// VPAWebhookClients are the client certificates (common names) the VPA
// webhook admits: the tenant API server's webhook client, and fke-manager,
// whose readiness check calls /healthz.
var VPAWebhookClients = []string{pki.APIServerWebhookUser, pki.ManagerUser}

// VerticalPodAutoscaler is the upstream VPA (recommender, updater and
// admission controller), run beside the control plane as one process of
// the cluster (fke-vpa, see internal/vpa), so it works whatever nodes the
// cluster has. The recommender reads usage from the resource metrics API
// (metrics-server), the updater evicts pods whose requests are far from the
// recommendation, and the admission controller, a mutating webhook, sets
// the recommended requests on new pods. The webhook names the ExternalName
// Service VPAWebhookService, whose name is where the runtime runs the
// process (127.0.0.1 beside a local API server), and the process serves a
// certificate of the cluster CA for pki.VPAWebhookServiceName. It takes
// only callers with a client certificate of the cluster CA named in
// VPAWebhookClients (the API server presents its own, see
// controlplane.AdmissionConfig); the process listens on nothing else. The three act as one user of the tenant (pki.VPAUser) with the
// permissions upstream's RBAC grants them together. Turning the addon off
// removes the webhook, the process and the RBAC; the CRDs stay, with the
// users' VerticalPodAutoscaler objects.
type VerticalPodAutoscaler struct{}

var _ Managed = VerticalPodAutoscaler{}

// Name implements Managed.
func (VerticalPodAutoscaler) Name() string { return VPAName }

// Version implements Managed.
func (VerticalPodAutoscaler) Version() string { return VPAVersion }

// Enabled implements Managed.
func (VerticalPodAutoscaler) Enabled(cl *fkev1.Cluster) bool {
	return cl.Spec.Addons.VerticalPodAutoscaler.Enabled
}

// Processes implements Managed: fke-vpa, which runs the recommender, the
// updater and the admission controller.
func (VerticalPodAutoscaler) Processes(cl *fkev1.Cluster, n controlplane.AddonNetwork, b pki.Bundle) ([]controlplane.Addon, error) {
	port := int(cl.Status.Ports.VPAWebhook)
	if port == 0 {
		return nil, errors.New("no port allocated for the VPA admission controller")
	}
	for _, f := range []string{pki.CACertFile, pki.VPAWebhookCertFile, pki.VPAWebhookKeyFile, pki.VPAClientCertFile, pki.VPAClientKeyFile,
		pki.ManagerCertFile, pki.ManagerKeyFile} {
		if len(b[f]) == 0 {
			return nil, fmt.Errorf("the cluster's PKI has no %s", f)
		}
	}
	kc, err := pki.Kubeconfig(cl.Name, n.APIServer, b[pki.CACertFile], b[pki.VPAClientCertFile], b[pki.VPAClientKeyFile], pki.VPAUser)
	if err != nil {
		return nil, fmt.Errorf("VPA kubeconfig: %w", err)
	}
	file := func(name string) string { return controlplane.AddonDirVar + "/" + name }
	return []controlplane.Addon{{
		Name: VPAName, Binary: VPABinary,
		Files: map[string][]byte{
			vpaKubeconfig:  kc,
			vpaCA:          b[pki.CACertFile],
			vpaServingCert: b[pki.VPAWebhookCertFile],
			vpaServingKey:  b[pki.VPAWebhookKeyFile],
		},
		Args: []string{
			"--kubeconfig=" + file(vpaKubeconfig),
			// Usage is fetched as often as metrics-server scrapes it
			// (MetricResolution), and the updater looks as often;
			// upstream's default is one minute for both.
			"--interval=" + MetricResolution,
			"--status-lease-namespace=" + vpaStatusNamespace,
			"--webhook-address=" + controlplane.AddonBindVar + ":" + strconv.Itoa(port),
			"--tls-cert-file=" + file(vpaServingCert),
			"--tls-private-key-file=" + file(vpaServingKey),
			"--client-ca-file=" + file(vpaCA),
			"--allowed-clients=" + strings.Join(VPAWebhookClients, ","),
		},
		Port:             int32(port),
		HealthURL:        "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz",
		HealthCA:         b[pki.CACertFile],
		HealthServerName: pki.VPAWebhookServiceName,
		HealthClientCert: b[pki.ManagerCertFile],
		HealthClientKey:  b[pki.ManagerKeyFile],
	}}, nil
}

// Install implements Managed: the CRDs, the RBAC, the webhook's Service
// (to the process on n) and the webhook.
func (VerticalPodAutoscaler) Install(ctx context.Context, cfg *rest.Config, cl *fkev1.Cluster, b pki.Bundle, n controlplane.AddonNetwork) error {
	port := cl.Status.Ports.VPAWebhook
	if port == 0 {
		return errors.New("VPA: no port allocated for the admission controller")
	}
	ext, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("VPA: apiextensions client: %w", err)
	}
	crds, err := tenantcrd.All()
	if err != nil {
		return err
	}
	for _, c := range crds {
		if c.Name != VPACRD && c.Name != VPACheckpointCRD {
			continue
		}
		if err := EnsureCRD(ctx, ext, c); err != nil {
			return fmt.Errorf("VPA: %w", err)
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("VPA: tenant client: %w", err)
	}
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	labels := map[string]string{"app.kubernetes.io/managed-by": "fke", "app.kubernetes.io/name": VPAName}
	if _, err := cs.RbacV1().ClusterRoles().Apply(ctx, rbacv1ac.ClusterRole(VPAClusterRole).WithLabels(labels).WithRules(vpaRules()...), apply); err != nil {
		return fmt.Errorf("VPA: applying ClusterRole %s: %w", VPAClusterRole, err)
	}
	user := rbacv1ac.Subject().WithKind("User").WithAPIGroup("rbac.authorization.k8s.io").WithName(pki.VPAUser)
	if _, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, rbacv1ac.ClusterRoleBinding(VPAClusterRole).WithLabels(labels).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(VPAClusterRole)).
		WithSubjects(user), apply); err != nil {
		return fmt.Errorf("VPA: applying ClusterRoleBinding %s: %w", VPAClusterRole, err)
	}
	if _, err := cs.CoreV1().Services(metav1.NamespaceSystem).Apply(ctx, corev1ac.Service(VPAWebhookService, metav1.NamespaceSystem).WithLabels(labels).
		WithSpec(corev1ac.ServiceSpec().WithType(corev1.ServiceTypeExternalName).WithExternalName(n.Host(VPAName)).
			WithPorts(corev1ac.ServicePort().WithName("https").WithProtocol(corev1.ProtocolTCP).WithPort(port))), apply); err != nil {
		return fmt.Errorf("VPA: applying Service %s: %w", VPAWebhookService, err)
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Apply(ctx, vpaWebhook(port, b[pki.CACertFile], labels), apply); err != nil {
		return fmt.Errorf("VPA: applying MutatingWebhookConfiguration %s: %w", VPAWebhookConfig, err)
	}
	return nil
}

// vpaRules are the permissions of the recommender, updater and admission
// controller together (as upstream's RBAC grants them to the three).
func vpaRules() []*rbacv1ac.PolicyRuleApplyConfiguration {
	rule := func(groups []string, resources []string, verbs ...string) *rbacv1ac.PolicyRuleApplyConfiguration {
		return rbacv1ac.PolicyRule().WithAPIGroups(groups...).WithResources(resources...).WithVerbs(verbs...)
	}
	read := []string{"get", "list", "watch"}
	return []*rbacv1ac.PolicyRuleApplyConfiguration{
		rule([]string{""}, []string{"pods", "nodes", "limitranges", "namespaces", "replicationcontrollers"}, read...),
		rule([]string{""}, []string{"pods/eviction"}, "create"),
		rule([]string{""}, []string{"pods/resize"}, "patch"),
		rule([]string{""}, []string{"events"}, "create", "patch", "update"),
		rule([]string{"events.k8s.io"}, []string{"events"}, "create", "patch", "update"),
		rule([]string{"apps"}, []string{"deployments", "replicasets", "statefulsets", "daemonsets"}, read...),
		rule([]string{"batch"}, []string{"jobs", "cronjobs"}, read...),
		// VPA targets are read through their scale subresource.
		rule([]string{"*"}, []string{"*/scale"}, "get", "watch"),
		rule([]string{"metrics.k8s.io"}, []string{"pods", "nodes"}, "get", "list"),
		rule([]string{"autoscaling.k8s.io"}, []string{"verticalpodautoscalers"}, "get", "list", "watch", "patch", "update"),
		rule([]string{"autoscaling.k8s.io"}, []string{"verticalpodautoscalers/status"}, "get", "patch", "update"),
		rule([]string{"autoscaling.k8s.io"}, []string{"verticalpodautoscalercheckpoints"}, "get", "list", "watch", "create", "patch", "update", "delete"),
		rule([]string{"coordination.k8s.io"}, []string{"leases"}, "get", "list", "watch", "create", "update"),
		rule([]string{"admissionregistration.k8s.io"}, []string{"mutatingwebhookconfigurations"}, read...),
	}
}

// vpaWebhook is the admission controller's webhook as upstream registers
// it (new pods, and VPA objects on create and update; failures ignored, so
// pods are admitted when it is down), reached through VPAWebhookService.
func vpaWebhook(port int32, caPEM []byte, labels map[string]string) *admissionac.MutatingWebhookConfigurationApplyConfiguration {
	return admissionac.MutatingWebhookConfiguration(VPAWebhookConfig).WithLabels(labels).WithWebhooks(
		admissionac.MutatingWebhook().WithName(VPAWebhook).
			WithAdmissionReviewVersions("v1").
			WithClientConfig(admissionac.WebhookClientConfig().WithCABundle(caPEM...).
				WithService(admissionac.ServiceReference().WithNamespace(metav1.NamespaceSystem).WithName(VPAWebhookService).WithPort(port))).
			WithRules(
				admissionac.RuleWithOperations().WithOperations(admissionregistrationv1.Create).
					WithAPIGroups("").WithAPIVersions("v1").WithResources("pods"),
				admissionac.RuleWithOperations().WithOperations(admissionregistrationv1.Create, admissionregistrationv1.Update).
					WithAPIGroups("autoscaling.k8s.io").WithAPIVersions("*").WithResources("verticalpodautoscalers"),
			).
			WithFailurePolicy(admissionregistrationv1.Ignore).
			WithSideEffects(admissionregistrationv1.SideEffectClassNone).
			WithTimeoutSeconds(10).
			// Never the control plane's own namespace: a pod there is not
			// held up by a webhook that runs beside it.
			WithNamespaceSelector(metav1ac.LabelSelector().WithMatchExpressions(
				metav1ac.LabelSelectorRequirement().WithKey(corev1.LabelMetadataName).
					WithOperator(metav1.LabelSelectorOpNotIn).WithValues(metav1.NamespaceSystem))),
	)
}

// Serving implements Managed: the VPA API is established and the webhook
// is in place.
func (VerticalPodAutoscaler) Serving(ctx context.Context, cfg *rest.Config) (bool, string, error) {
	ext, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return false, "", fmt.Errorf("VPA: apiextensions client: %w", err)
	}
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, VPACRD, metav1.GetOptions{})
	if err != nil {
		return false, "", fmt.Errorf("VPA: getting CRD %s: %w", VPACRD, err)
	}
	if !established(crd) {
		return false, "CRD " + VPACRD + " not established yet", nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, "", fmt.Errorf("VPA: tenant client: %w", err)
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, VPAWebhookConfig, metav1.GetOptions{}); err != nil {
		return false, "", fmt.Errorf("VPA: getting MutatingWebhookConfiguration %s: %w", VPAWebhookConfig, err)
	}
	return true, "recommender, updater and admission controller run; serves verticalpodautoscalers.autoscaling.k8s.io", nil
}

// Remove implements Managed: the webhook first (pods no longer wait for
// it), then the RBAC. The CRDs and the users' VPA objects stay.
func (VerticalPodAutoscaler) Remove(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("VPA: tenant client: %w", err)
	}
	del := metav1.DeleteOptions{}
	steps := []struct {
		what string
		do   func() error
	}{
		{"MutatingWebhookConfiguration " + VPAWebhookConfig, func() error {
			return cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, VPAWebhookConfig, del)
		}},
		{"Service " + VPAWebhookService, func() error {
			return cs.CoreV1().Services(metav1.NamespaceSystem).Delete(ctx, VPAWebhookService, del)
		}},
		{"ClusterRoleBinding " + VPAClusterRole, func() error { return cs.RbacV1().ClusterRoleBindings().Delete(ctx, VPAClusterRole, del) }},
		{"ClusterRole " + VPAClusterRole, func() error { return cs.RbacV1().ClusterRoles().Delete(ctx, VPAClusterRole, del) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("VPA: deleting %s: %w", s.what, err)
		}
	}
	return nil
}
