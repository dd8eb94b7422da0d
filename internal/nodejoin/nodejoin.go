// Package nodejoin says how real nodes join a tenant cluster: the address
// they reach its API server at, the CA they trust, the DNS address they give
// pods, and the credentials their kubelet and kube-proxy start with.
package nodejoin

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"fke.dev/fke/internal/bootstrap"
	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/pki"
)

// Users of the node credentials (the API server's default RBAC binds
// system:nodes through the Node authorizer and system:kube-proxy to
// system:node-proxier).
const (
	NodesGroup     = "system:nodes"
	NodeUserPrefix = "system:node:"
	KubeProxyUser  = "system:kube-proxy"
)

// ServerName is the name nodes verify in the API server's certificate; the
// serving certificate always covers it.
const ServerName = "kubernetes"

// NodeServer returns the API server URL nodes use: for an API server on
// loopback (the local runtime), the gateway of the host bridge at its port
// (hostnet exposes it there); otherwise (the hosted runtime's node port)
// endpoint itself.
func NodeServer(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Port() == "" {
		return "", fmt.Errorf("API server endpoint %q has no port", endpoint)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return "https://" + u.Host, nil
	}
	return "https://" + hostnet.Gateway.String() + ":" + u.Port(), nil
}

// NodeRegistry returns the address nodes pull images from for a registry
// that listens on loopback at registry (host:port): the gateway of the host
// bridge at the same port (hostnet exposes it there).
func NodeRegistry(registry string) (string, error) {
	_, port, err := net.SplitHostPort(registry)
	if err != nil || port == "" {
		return "", fmt.Errorf("registry address %q has no port", registry)
	}
	return net.JoinHostPort(hostnet.Gateway.String(), port), nil
}

// DNSIP returns the cluster DNS address of a Service range: its 10th address.
func DNSIP(serviceCIDR string) (string, error) {
	p, err := netip.ParsePrefix(serviceCIDR)
	if err != nil {
		return "", fmt.Errorf("service range %q: %w", serviceCIDR, err)
	}
	a := p.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	if !p.Contains(a) {
		return "", fmt.Errorf("service range %s has no 10th address", serviceCIDR)
	}
	return a.String(), nil
}

// CALoader returns the cluster CA with its key.
type CALoader func(ctx context.Context) (*pki.KeyPair, error)

// CertCredentials issues client certificates signed by the cluster CA:
// system:node:<name> in system:nodes for kubelets, system:kube-proxy for
// kube-proxy. It is the path for nodes the manager makes itself without a
// client of the tenant to make bootstrap tokens with (and for tests of
// providers); their certificates are written into the node's own files on
// this host, never handed out. Other nodes use bootstrap tokens
// (TokenCredentials, BootstrapFile).
type CertCredentials struct {
	ClusterName   string
	Server        string
	TLSServerName string
	CA            CALoader
}

var _ nodeprovider.Credentials = (*CertCredentials)(nil)

// KubeletKubeconfig returns a client-certificate kubeconfig of system:node:<nodeName>.
func (c *CertCredentials) KubeletKubeconfig(ctx context.Context, _, nodeName string) ([]byte, bool, error) {
	kc, err := c.issue(ctx, NodeUserPrefix+nodeName, NodesGroup)
	return kc, false, err
}

// ProxyKubeconfig returns a client-certificate kubeconfig of system:kube-proxy.
func (c *CertCredentials) ProxyKubeconfig(ctx context.Context) ([]byte, error) {
	return c.issue(ctx, KubeProxyUser)
}

func (c *CertCredentials) issue(ctx context.Context, user string, groups ...string) ([]byte, error) {
	ca, err := c.CA(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the CA of cluster %s: %w", c.ClusterName, err)
	}
	kp, err := ca.Issue(pki.CertSpec{CommonName: user, Organization: groups, Usages: pki.UsageClient})
	if err != nil {
		return nil, fmt.Errorf("issuing a certificate for %s: %w", user, err)
	}
	return Kubeconfig(c.ClusterName, c.Server, c.TLSServerName, ca.CertPEM(), &clientcmdapi.AuthInfo{
		ClientCertificateData: kp.CertPEM(), ClientKeyData: kp.KeyPEM(),
	})
}

// Kubeconfig renders a kubeconfig for server, trusting caPEM and verifying
// serverName, with the credentials of auth.
func Kubeconfig(clusterName, server, serverName string, caPEM []byte, auth *clientcmdapi.AuthInfo) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM, TLSServerName: serverName}
	cfg.AuthInfos["node"] = auth
	cfg.Contexts["node@"+clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: "node"}
	cfg.CurrentContext = "node@" + clusterName
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing kubeconfig for %s: %w", clusterName, err)
	}
	return data, nil
}

// Join returns the join of a cluster whose API server listens at endpoint
// on loopback, with CA caPEM, Service range serviceCIDR and node
// credentials creds.
func Join(endpoint string, caPEM []byte, serviceCIDR string, creds nodeprovider.Credentials) (*nodeprovider.Join, error) {
	server, err := NodeServer(endpoint)
	if err != nil {
		return nil, err
	}
	dns, err := DNSIP(serviceCIDR)
	if err != nil {
		return nil, err
	}
	return &nodeprovider.Join{Server: server, TLSServerName: ServerName, CAPEM: caPEM, DNSIP: dns, Credentials: creds}, nil
}

// PortOf returns the port of a URL.
func PortOf(endpoint string) (int, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(u.Port())
}

// Token lifetimes of the pools' bootstrap tokens: a node joins within
// minutes, so a token handed out is valid for at least TokenMinValid.
const (
	TokenTTL      = 24 * time.Hour
	TokenMinValid = time.Hour
)

// FileTokenMinTTL is the shortest lifetime of a bootstrap file's token.
const FileTokenMinTTL = 10 * time.Minute

// CheckFileTokenTTL says why ttl will not do as the lifetime of a bootstrap
// file's token: it must be from FileTokenMinTTL (a host needs minutes to
// join) to TokenTTL (the pools' own tokens live no longer). Pure.
func CheckFileTokenTTL(ttl time.Duration) error {
	if ttl < FileTokenMinTTL || ttl > TokenTTL {
		return fmt.Errorf("--ttl %s: a bootstrap file's token lives from %s to %s (the lifetime of the pools' own tokens)", ttl, FileTokenMinTTL, TokenTTL)
	}
	return nil
}

// TokenCredentials join kubelets by TLS bootstrap, as kubeadm does: a
// bootstrap token of the node's pool (bootstrap.EnsureToken), with which
// the kubelet requests its client certificate, approved and signed by the
// tenant's kube-controller-manager. kube-proxy's certificate is then asked
// for by the node itself (bootstrap.ProxyCertificate): none is handed out.
type TokenCredentials struct {
	// Client reaches the tenant with rights to manage bootstrap tokens.
	Client kubernetes.Interface
	Server string
	CAPEM  []byte
}

var _ nodeprovider.Credentials = (*TokenCredentials)(nil)

// KubeletKubeconfig returns a bootstrap kubeconfig with pool's token.
func (c *TokenCredentials) KubeletKubeconfig(ctx context.Context, pool, _ string) ([]byte, bool, error) {
	token, _, err := bootstrap.EnsureToken(ctx, c.Client, pool, TokenTTL, TokenMinValid)
	if err != nil {
		return nil, false, err
	}
	kc, err := bootstrap.BootstrapKubeconfig(c.Server, c.CAPEM, token)
	return kc, true, err
}

// ProxyKubeconfig returns nil: each node asks for its kube-proxy's
// certificate with its kubelet's credential once it joined.
func (c *TokenCredentials) ProxyKubeconfig(context.Context) ([]byte, error) { return nil, nil }
