package bootstrap

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

// NodeUserPrefix prefixes the user name of a node's credentials.
const NodeUserPrefix = "system:node:"

// Action is what CSRApprover does with a CSR.
type Action string

const (
	// Ignore: not a pending CSR fke decides on.
	Ignore Action = "Ignore"
	// Wait: the requesting node is not registered yet; look again later.
	Wait Action = "Wait"
	// Approve: the request matches its node.
	Approve Action = "Approve"
	// Deny: the request does not match its node.
	Deny Action = "Deny"
)

// Reasons CSRApprover writes into the Approved and Denied conditions.
const (
	ReasonNodeVerified  = "FKENodeVerified"
	ReasonNotANode      = "FKENotANode"
	ReasonBadRequest    = "FKEBadRequest"
	ReasonNodeMismatch  = "FKENodeMismatch"
	ReasonNotRegistered = "FKENodeNotRegistered"
)

// Decision is CSRApprover's verdict on one CSR.
type Decision struct {
	Action  Action
	Reason  string
	Message string
}

func deny(reason, format string, args ...any) Decision {
	return Decision{Action: Deny, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// serverUsages are the usages a kubelet serving certificate may ask for.
var serverUsages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageServerAuth}

// DecideServing decides on a kubelet-serving CSR. node is the Node named by
// the requesting user (nil when there is none). It approves only when the
// request comes from system:node:<name> in group system:nodes, asks for a
// certificate with subject CN=system:node:<name>, O=system:nodes, server
// usages only, and SANs that are all the node's: DNS names equal to the node
// name or one of its Hostname addresses, IP addresses among its InternalIP
// addresses, no e-mail or URI names. It waits while the node is not
// registered and denies, with a reason, everything else. Pure.
func DecideServing(csr *certv1.CertificateSigningRequest, node *corev1.Node) Decision {
	if csr.Spec.SignerName != certv1.KubeletServingSignerName || decided(csr) {
		return Decision{Action: Ignore}
	}
	nodeName, ok := strings.CutPrefix(csr.Spec.Username, NodeUserPrefix)
	if !ok || nodeName == "" || !slices.Contains(csr.Spec.Groups, NodesGroup) {
		return deny(ReasonNotANode, "kubelet serving certificates are issued only to nodes (user system:node:<name> in group system:nodes), not to %q", csr.Spec.Username)
	}
	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		return deny(ReasonBadRequest, "%v", err)
	}
	if req.Subject.CommonName != csr.Spec.Username || !slices.Equal(req.Subject.Organization, []string{NodesGroup}) {
		return deny(ReasonBadRequest, "subject must be CN=%s, O=%s; got CN=%s, O=%v", csr.Spec.Username, NodesGroup, req.Subject.CommonName, req.Subject.Organization)
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return deny(ReasonBadRequest, "e-mail and URI names are not allowed in a kubelet serving certificate")
	}
	if !slices.Contains(csr.Spec.Usages, certv1.UsageServerAuth) {
		return deny(ReasonBadRequest, "usages must include %q", certv1.UsageServerAuth)
	}
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(serverUsages, u) {
			return deny(ReasonBadRequest, "usage %q is not allowed for a kubelet serving certificate", u)
		}
	}
	if len(req.DNSNames)+len(req.IPAddresses) == 0 {
		return deny(ReasonBadRequest, "the request names no DNS name or IP address")
	}
	if node == nil {
		return Decision{Action: Wait, Reason: ReasonNotRegistered, Message: fmt.Sprintf("node %s is not registered", nodeName)}
	}
	dns, ips := nodeSANs(node)
	for _, name := range req.DNSNames {
		if !slices.Contains(dns, name) {
			return deny(ReasonNodeMismatch, "DNS name %q is not an address of node %s (allowed: %v)", name, nodeName, dns)
		}
	}
	for _, ip := range req.IPAddresses {
		if !slices.ContainsFunc(ips, ip.Equal) {
			return deny(ReasonNodeMismatch, "IP address %s is not an InternalIP of node %s (allowed: %v)", ip, nodeName, ips)
		}
	}
	return Decision{Action: Approve, Reason: ReasonNodeVerified, Message: fmt.Sprintf("fke verified the name and addresses of node %s", nodeName)}
}

// nodeSANs returns the names and addresses a serving certificate of node may carry.
func nodeSANs(node *corev1.Node) (dns []string, ips []net.IP) {
	dns = []string{node.Name}
	for _, a := range node.Status.Addresses {
		switch a.Type {
		case corev1.NodeHostName:
			if !slices.Contains(dns, a.Address) {
				dns = append(dns, a.Address)
			}
		case corev1.NodeInternalIP:
			if ip := net.ParseIP(a.Address); ip != nil {
				ips = append(ips, ip)
			}
		}
	}
	return dns, ips
}

func decided(csr *certv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certv1.CertificateApproved || c.Type == certv1.CertificateDenied || c.Type == certv1.CertificateFailed {
			return true
		}
	}
	return false
}

func parseRequest(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("spec.request is not a PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing spec.request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("spec.request signature: %w", err)
	}
	return req, nil
}
