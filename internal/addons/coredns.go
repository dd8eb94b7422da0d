package addons

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
)

// FieldManager owns what the addons write by server-side apply.
const FieldManager = "fke-addons"

// Names of the cluster DNS objects (kube-system), as kubeadm names them.
const (
	DNSName        = "coredns"
	DNSServiceName = "kube-dns"
	DNSAppLabel    = "kube-dns"
	// DNSClusterRole is the ClusterRole letting CoreDNS watch Services and
	// EndpointSlices.
	DNSClusterRole = "system:coredns"
	DefaultDomain  = "cluster.local"
)

// DNSOptions configure the cluster DNS addon.
type DNSOptions struct {
	// Image is the CoreDNS image as nodes pull it, e.g.
	// 172.29.0.1:5000/fke/coredns:v1.15.0. Required.
	Image string
	// ServiceCIDR is the cluster's Service range; the DNS Service takes its
	// 10th address (DNSServiceIP), the address kubelets are given.
	ServiceCIDR string
	// Domain is the cluster domain; empty means cluster.local.
	Domain string
	// Replicas defaults to 2.
	Replicas int32
}

// DNSServiceIP returns the ClusterIP of the DNS Service: the 10th address
// of serviceCIDR (10.96.0.10 for 10.96.0.0/16), as kubeadm chooses it.
func DNSServiceIP(serviceCIDR string) (netip.Addr, error) {
	p, err := netip.ParsePrefix(serviceCIDR)
	if err != nil || !p.Addr().Is4() {
		return netip.Addr{}, fmt.Errorf("service CIDR %q is not an IPv4 CIDR", serviceCIDR)
	}
	if p.Bits() > 28 {
		return netip.Addr{}, fmt.Errorf("service CIDR %s is too small for a DNS address (.10)", serviceCIDR)
	}
	a := p.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	return a, nil
}

// Corefile is CoreDNS's configuration: it answers for the cluster domain
// and reverse lookups from the Kubernetes API and forwards nothing outside
// the cluster (there is no forward plugin: other names fail fast).
func Corefile(domain string) string { return CorefileFor(CorefileOptions{Domain: domain}) }

// CorefileOptions vary the Corefile; the zero value is what runs in a
// cluster (in-cluster credentials, the standard ports).
type CorefileOptions struct {
	// Domain is the cluster domain; empty means cluster.local.
	Domain string
	// Port is the DNS port (":53" when empty, else like ":1053").
	Port string
	// Bind, when set, restricts the DNS server to this address.
	Bind string
	// HealthAddr, ReadyAddr and MetricsAddr default to :8080, :8181, :9153.
	HealthAddr, ReadyAddr, MetricsAddr string
	// Kubeconfig, when set, is used instead of in-cluster credentials (to
	// run CoreDNS outside a pod).
	Kubeconfig string
}

// CorefileFor renders the Corefile for o. It caches answers 30 s, as
// kubeadm's does, but "no such name" only 5 s: a StatefulSet's pod names
// appear in DNS only once its EndpointSlices list the pods, and a peer or
// client that asked a moment before (an etcd member for the others, a
// hosted control plane's API server for its etcd) would otherwise be told
// the name does not exist for half a minute.
func CorefileFor(o CorefileOptions) string {
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	bind := ""
	if o.Bind != "" {
		bind = "\n    bind " + o.Bind
	}
	kubeconfig := ""
	if o.Kubeconfig != "" {
		kubeconfig = "\n        kubeconfig " + o.Kubeconfig
	}
	return "." + def(o.Port, ":53") + ` {` + bind + `
    errors
    health ` + def(o.HealthAddr, ":8080") + ` {
        lameduck 5s
    }
    ready ` + def(o.ReadyAddr, ":8181") + `
    kubernetes ` + def(o.Domain, DefaultDomain) + ` in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30` + kubeconfig + `
    }
    prometheus ` + def(o.MetricsAddr, ":9153") + `
    cache 30 {
        denial 9984 5
    }
    reload
    loadbalance
}
`
}

// EnsureCoreDNS applies the cluster DNS addon to the tenant c by
// server-side apply (idempotent; fke owns the fields it sets): ServiceAccount,
// ClusterRole and binding, the Corefile ConfigMap, the Deployment and the
// kube-dns Service at DNSServiceIP. It does not wait for CoreDNS to be ready.
func EnsureCoreDNS(ctx context.Context, c kubernetes.Interface, opts DNSOptions) error {
	if opts.Image == "" {
		return errors.New("cluster DNS: no CoreDNS image")
	}
	ip, err := DNSServiceIP(opts.ServiceCIDR)
	if err != nil {
		return fmt.Errorf("cluster DNS: %w", err)
	}
	if opts.Replicas == 0 {
		opts.Replicas = 2
	}
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	const ns = metav1.NamespaceSystem
	labels := map[string]string{"k8s-app": DNSAppLabel, "app.kubernetes.io/managed-by": "fke"}

	steps := []struct {
		what string
		do   func() error
	}{
		{"ServiceAccount", func() error {
			_, err := c.CoreV1().ServiceAccounts(ns).Apply(ctx, corev1ac.ServiceAccount(DNSName, ns).WithLabels(labels), apply)
			return err
		}},
		{"ClusterRole", func() error {
			_, err := c.RbacV1().ClusterRoles().Apply(ctx, rbacv1ac.ClusterRole(DNSClusterRole).WithLabels(labels).WithRules(
				rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("endpoints", "services", "pods", "namespaces").WithVerbs("list", "watch"),
				rbacv1ac.PolicyRule().WithAPIGroups("discovery.k8s.io").WithResources("endpointslices").WithVerbs("list", "watch"),
			), apply)
			return err
		}},
		{"ClusterRoleBinding", func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Apply(ctx, rbacv1ac.ClusterRoleBinding(DNSClusterRole).WithLabels(labels).
				WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(DNSClusterRole)).
				WithSubjects(rbacv1ac.Subject().WithKind("ServiceAccount").WithName(DNSName).WithNamespace(ns)), apply)
			return err
		}},
		{"ConfigMap", func() error {
			_, err := c.CoreV1().ConfigMaps(ns).Apply(ctx, corev1ac.ConfigMap(DNSName, ns).WithLabels(labels).
				WithData(map[string]string{"Corefile": Corefile(opts.Domain)}), apply)
			return err
		}},
		{"Deployment", func() error {
			_, err := c.AppsV1().Deployments(ns).Apply(ctx, dnsDeployment(opts, labels), apply)
			return err
		}},
		{"Service", func() error {
			_, err := c.CoreV1().Services(ns).Apply(ctx, corev1ac.Service(DNSServiceName, ns).
				WithLabels(labels).WithLabels(map[string]string{"kubernetes.io/name": "CoreDNS"}).
				WithSpec(corev1ac.ServiceSpec().WithClusterIP(ip.String()).WithSelector(map[string]string{"k8s-app": DNSAppLabel}).WithPorts(
					corev1ac.ServicePort().WithName("dns").WithProtocol(corev1.ProtocolUDP).WithPort(53).WithTargetPort(intstr.FromInt32(53)),
					corev1ac.ServicePort().WithName("dns-tcp").WithProtocol(corev1.ProtocolTCP).WithPort(53).WithTargetPort(intstr.FromInt32(53)),
					corev1ac.ServicePort().WithName("metrics").WithProtocol(corev1.ProtocolTCP).WithPort(9153).WithTargetPort(intstr.FromInt32(9153)),
				)), apply)
			return err
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("cluster DNS: applying %s %s: %w", s.what, DNSName, err)
		}
	}
	return nil
}

// dnsDeployment is CoreDNS's Deployment: critical priority, spread over
// nodes when it can be, least privilege (NET_BIND_SERVICE only, read-only
// root), and the node's resolver rather than itself (dnsPolicy Default).
func dnsDeployment(opts DNSOptions, labels map[string]string) *appsv1ac.DeploymentApplyConfiguration {
	selector := map[string]string{"k8s-app": DNSAppLabel}
	container := corev1ac.Container().WithName("coredns").WithImage(opts.Image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithArgs("-conf", "/etc/coredns/Corefile").
		WithPorts(
			corev1ac.ContainerPort().WithName("dns").WithContainerPort(53).WithProtocol(corev1.ProtocolUDP),
			corev1ac.ContainerPort().WithName("dns-tcp").WithContainerPort(53).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName("metrics").WithContainerPort(9153).WithProtocol(corev1.ProtocolTCP),
		).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceCPU: mustQuantity("100m"), corev1.ResourceMemory: mustQuantity("70Mi")}).
			WithLimits(corev1.ResourceList{corev1.ResourceMemory: mustQuantity("170Mi")})).
		WithVolumeMounts(corev1ac.VolumeMount().WithName("config").WithMountPath("/etc/coredns").WithReadOnly(true)).
		WithLivenessProbe(corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().WithPath("/health").WithPort(intstr.FromInt32(8080))).
			WithInitialDelaySeconds(10).WithTimeoutSeconds(5).WithFailureThreshold(5)).
		WithReadinessProbe(corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().WithPath("/ready").WithPort(intstr.FromInt32(8181))).
			WithPeriodSeconds(2)).
		WithSecurityContext(corev1ac.SecurityContext().WithAllowPrivilegeEscalation(false).WithReadOnlyRootFilesystem(true).
			WithCapabilities(corev1ac.Capabilities().WithAdd("NET_BIND_SERVICE").WithDrop("ALL")))
	pod := corev1ac.PodSpec().
		WithServiceAccountName(DNSName).
		WithPriorityClassName("system-cluster-critical").
		WithDNSPolicy(corev1.DNSDefault).
		WithNodeSelector(map[string]string{corev1.LabelOSStable: "linux"}).
		WithTolerations(corev1ac.Toleration().WithKey("CriticalAddonsOnly").WithOperator(corev1.TolerationOpExists)).
		WithAffinity(corev1ac.Affinity().WithPodAntiAffinity(corev1ac.PodAntiAffinity().WithPreferredDuringSchedulingIgnoredDuringExecution(
			corev1ac.WeightedPodAffinityTerm().WithWeight(100).WithPodAffinityTerm(corev1ac.PodAffinityTerm().
				WithTopologyKey(corev1.LabelHostname).
				WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(selector)))))).
		WithContainers(container).
		WithVolumes(corev1ac.Volume().WithName("config").WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(DNSName).
			WithItems(corev1ac.KeyToPath().WithKey("Corefile").WithPath("Corefile"))))
	return appsv1ac.Deployment(DNSName, metav1.NamespaceSystem).WithLabels(labels).
		WithSpec(appsv1ac.DeploymentSpec().WithReplicas(opts.Replicas).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
			WithStrategy(appsv1ac.DeploymentStrategy().WithType(appsv1.RollingUpdateDeploymentStrategyType).
				WithRollingUpdate(appsv1ac.RollingUpdateDeployment().WithMaxUnavailable(intstr.FromInt32(1)))).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(selector).
				WithAnnotations(map[string]string{"fke.dev/corefile-hash": corefileHash(opts.Domain)}).
				WithSpec(pod)))
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// corefileHash changes the pod template when the Corefile changes, so
// CoreDNS restarts with it (reload would also notice, within a minute).
func corefileHash(domain string) string {
	sum := sha256.Sum256([]byte(Corefile(domain)))
	return hex.EncodeToString(sum[:8])
}
