// Package bootstrap lets real nodes join a tenant cluster by TLS bootstrap,
// as kubeadm does: per-pool bootstrap tokens with an expiry (EnsureToken),
// RBAC so that their holders may ask for a client certificate and have it
// approved by kube-controller-manager (EnsureRBAC), the bootstrap kubeconfig
// a kubelet starts with (BootstrapKubeconfig), and a controller approving
// kubelet serving certificates only after checking the requesting node's
// name and addresses (ServingApprover).
package bootstrap
