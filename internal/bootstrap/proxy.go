package bootstrap

import (
	"fmt"
	"slices"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

// kube-proxy's credential on a node that joins by TLS bootstrap.
//
// kubeadm and EKS give kube-proxy an identity of its own, bound to
// system:node-proxier and nothing else, whose credential is short-lived and
// rotated (a projected service-account token of its DaemonSet); no
// distribution hands every node one long-lived kube-proxy certificate in
// the file it joins with, since anyone who copies that file could list the
// cluster's nodes and endpoints for a year. fke's kube-proxy is no pod, so
// the node itself obtains the credential the way its kubelet renews its
// own: once the kubelet has its client certificate, the node asks, with
// that certificate, for a kubernetes.io/kube-apiserver-client certificate
// of ProxyUser(node) in ProxyGroup that lives at most MaxProxyCertLifetime
// (ProxyCertificate), and asks again before it expires. fke's CSR approver
// approves such a request only from the node it names (DecideProxyClient),
// and kube-controller-manager signs it. The identity is per node, so that
// audit logs and a removed node's credential are told apart, and it holds
// no more than system:node-proxier (EnsureRBAC binds ProxyGroup to it);
// reusing the kubelet's system:node credential would have needed node
// credentials to read every EndpointSlice.
const (
	// ProxyUserPrefix prefixes the user of a node's kube-proxy: fke:kube-proxy:<node>.
	ProxyUserPrefix = "fke:kube-proxy:"
	// ProxyGroup is the group of every node's kube-proxy.
	ProxyGroup = "fke:kube-proxies"
	// MaxProxyCertLifetime is the longest a kube-proxy certificate is
	// approved for (its CSR's spec.expirationSeconds).
	MaxProxyCertLifetime = 24 * time.Hour
)

// ProxyUser is the user of node's kube-proxy.
func ProxyUser(node string) string { return ProxyUserPrefix + node }

// Reasons of decisions on kube-proxy CSRs (see also the serving reasons).
const (
	ReasonProxyVerified = "FKEKubeProxyVerified"
	ReasonLifetime      = "FKELifetimeTooLong"
)

// clientUsages are the usages a kube-proxy certificate may ask for.
var clientUsages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageClientAuth}

// DecideProxyClient decides on a kubernetes.io/kube-apiserver-client CSR.
// node is the Node named by the requesting user (nil when there is none).
// Requests of users who are no node and do not ask for a kube-proxy
// identity are someone else's and ignored. A node gets through this signer
// only its own kube-proxy's certificate: subject CN=fke:kube-proxy:<node>,
// O=fke:kube-proxies, client usages, no SANs, an expiration of at most
// MaxProxyCertLifetime; it waits while the node is not registered. Any
// other request of a node, or a request for a kube-proxy identity by a
// user who is no node, is denied with a reason. Pure.
func DecideProxyClient(csr *certv1.CertificateSigningRequest, node *corev1.Node) Decision {
	if csr.Spec.SignerName != certv1.KubeAPIServerClientSignerName || decided(csr) {
		return Decision{Action: Ignore}
	}
	nodeName, isNode := strings.CutPrefix(csr.Spec.Username, NodeUserPrefix)
	isNode = isNode && nodeName != "" && slices.Contains(csr.Spec.Groups, NodesGroup)
	req, err := parseRequest(csr.Spec.Request)
	if !isNode {
		if err == nil && (strings.HasPrefix(req.Subject.CommonName, ProxyUserPrefix) || slices.Contains(req.Subject.Organization, ProxyGroup)) {
			return deny(ReasonNotANode, "kube-proxy certificates are issued only to the nodes they run on (user system:node:<name> in group system:nodes), not to %q", csr.Spec.Username)
		}
		return Decision{Action: Ignore}
	}
	if err != nil {
		return deny(ReasonBadRequest, "%v", err)
	}
	want := ProxyUser(nodeName)
	if req.Subject.CommonName != want || !slices.Equal(req.Subject.Organization, []string{ProxyGroup}) {
		reason := ReasonBadRequest
		if strings.HasPrefix(req.Subject.CommonName, ProxyUserPrefix) && req.Subject.CommonName != want {
			reason = ReasonNodeMismatch
		}
		return deny(reason, "node %s may ask signer %s only for its kube-proxy's certificate, subject CN=%s, O=%s; got CN=%s, O=%v",
			nodeName, certv1.KubeAPIServerClientSignerName, want, ProxyGroup, req.Subject.CommonName, req.Subject.Organization)
	}
	if len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0 {
		return deny(ReasonBadRequest, "a kube-proxy certificate names no DNS name, IP address, e-mail or URI")
	}
	if !slices.Contains(csr.Spec.Usages, certv1.UsageClientAuth) {
		return deny(ReasonBadRequest, "usages must include %q", certv1.UsageClientAuth)
	}
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(clientUsages, u) {
			return deny(ReasonBadRequest, "usage %q is not allowed for a kube-proxy certificate", u)
		}
	}
	if e := csr.Spec.ExpirationSeconds; e == nil || time.Duration(*e)*time.Second > MaxProxyCertLifetime {
		return deny(ReasonLifetime, "a kube-proxy certificate lives at most %s: set spec.expirationSeconds to %d or less", MaxProxyCertLifetime, int(MaxProxyCertLifetime.Seconds()))
	}
	if node == nil {
		return Decision{Action: Wait, Reason: ReasonNotRegistered, Message: fmt.Sprintf("node %s is not registered", nodeName)}
	}
	return Decision{Action: Approve, Reason: ReasonProxyVerified, Message: fmt.Sprintf("fke verified that node %s asks for its own kube-proxy's certificate", nodeName)}
}

// Decide decides on a CSR of either signer fke's approver looks at:
// kubelet serving certificates (DecideServing) and kube-proxy client
// certificates (DecideProxyClient). Pure.
func Decide(csr *certv1.CertificateSigningRequest, node *corev1.Node) Decision {
	switch csr.Spec.SignerName {
	case certv1.KubeletServingSignerName:
		return DecideServing(csr, node)
	case certv1.KubeAPIServerClientSignerName:
		return DecideProxyClient(csr, node)
	default:
		return Decision{Action: Ignore}
	}
}
