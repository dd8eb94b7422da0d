package bootstrap

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
)

// FieldManager is the server-side-apply field manager of what this package writes.
const FieldManager = "fke-bootstrap"

// NodesGroup is the group of every node's credentials.
const NodesGroup = "system:nodes"

// Names of the ClusterRoleBindings EnsureRBAC keeps.
const (
	BindingNodeBootstrapper  = "fke:node-bootstrapper"
	BindingAutoApproveClient = "fke:node-autoapprove-bootstrap"
	BindingAutoApproveRenew  = "fke:node-autoapprove-certificate-rotation"
	BindingKubeProxies       = "fke:kube-proxies"
)

// binding is one ClusterRoleBinding of a built-in ClusterRole to a group.
type binding struct{ name, role, group string }

// bindings grants, with the ClusterRoles every API server creates:
// bootstrap-token holders may create CSRs (system:node-bootstrapper) and
// kube-controller-manager's csrapproving controller approves their node
// client CSRs (nodeclient); nodes may renew their own client certificate
// (selfnodeclient); the nodes' kube-proxies have what kube-proxy needs
// (system:node-proxier, as kubeadm binds its kube-proxy service account).
var bindings = []binding{
	{BindingNodeBootstrapper, "system:node-bootstrapper", bootstrapapi.BootstrapDefaultGroup},
	{BindingAutoApproveClient, "system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrapapi.BootstrapDefaultGroup},
	{BindingAutoApproveRenew, "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", NodesGroup},
	{BindingKubeProxies, "system:node-proxier", ProxyGroup},
}

// EnsureRBAC installs, idempotently (server-side apply), in a tenant:
// system:bootstrappers may create CSRs (system:node-bootstrapper) and have
// node-client CSRs auto-approved by kube-controller-manager's csrapproving
// controller (nodeclient), system:nodes may renew (selfnodeclient), and
// the nodes' kube-proxies (ProxyGroup) are system:node-proxier.
func EnsureRBAC(ctx context.Context, c kubernetes.Interface) error {
	for _, b := range bindings {
		crb := rbacv1ac.ClusterRoleBinding(b.name).
			WithLabels(map[string]string{"app.kubernetes.io/managed-by": "fke"}).
			WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(b.role)).
			WithSubjects(rbacv1ac.Subject().WithAPIGroup("rbac.authorization.k8s.io").WithKind("Group").WithName(b.group))
		if _, err := c.RbacV1().ClusterRoleBindings().Apply(ctx, crb, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return fmt.Errorf("applying ClusterRoleBinding %s: %w", b.name, err)
		}
	}
	return nil
}
