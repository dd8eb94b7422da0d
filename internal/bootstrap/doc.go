// Package bootstrap lets real nodes join a tenant cluster by TLS bootstrap,
// as kubeadm does: per-pool bootstrap tokens with an expiry (EnsureToken,
// CreateToken), RBAC so that their holders may ask for a client
// certificate and have it approved by kube-controller-manager (EnsureRBAC),
// the bootstrap kubeconfig a kubelet starts with (BootstrapKubeconfig), a
// controller approving kubelet serving certificates only after checking the
// requesting node's name and addresses, and kube-proxy client certificates
// only for the requesting node's own kube-proxy (CSRApprover), and the
// node's side of the latter: a short-lived kube-proxy certificate, renewed
// before it expires (ProxyCertificate).
package bootstrap
