package pki

import (
	"fmt"
	"time"
)

// KubeProxyUser is the user kube-proxy authenticates as; the API server's
// default RBAC binds it to the system:node-proxier ClusterRole.
const KubeProxyUser = "system:kube-proxy"

// ClientKubeconfig issues, with the bundle's cluster CA, a client
// certificate for user in groups, valid for validity (DefaultLeafValidity
// when zero), and returns a kubeconfig for server embedding it. The
// certificate is not added to the bundle: the caller keeps the kubeconfig.
func ClientKubeconfig(b Bundle, clusterName, server, user string, validity time.Duration, groups ...string) ([]byte, error) {
	ca, err := b.KeyPair(CA)
	if err != nil {
		return nil, fmt.Errorf("client kubeconfig for %s: %w", user, err)
	}
	kp, err := ca.Issue(CertSpec{CommonName: user, Organization: groups, Usages: UsageClient, Validity: validity})
	if err != nil {
		return nil, fmt.Errorf("client kubeconfig for %s: %w", user, err)
	}
	return Kubeconfig(clusterName, server, b[CACertFile], kp.CertPEM(), kp.KeyPEM(), user)
}

// KubeProxyKubeconfig is the kubeconfig of a node's kube-proxy: a client
// certificate for system:kube-proxy signed by the cluster CA.
func KubeProxyKubeconfig(b Bundle, clusterName, server string) ([]byte, error) {
	return ClientKubeconfig(b, clusterName, server, KubeProxyUser, 0)
}
