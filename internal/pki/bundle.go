package pki

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"
)

// Base names of the key pairs in a Bundle; a pair is stored as base+".crt"
// and base+".key" (see CertFile and KeyFile) and loaded with Bundle.KeyPair.
const (
	// CA is the cluster CA: it signs the API server's serving certificate
	// and every client certificate the API server accepts.
	CA = "ca"
	// FrontProxyCA signs the front-proxy client certificate
	// (--requestheader-client-ca-file).
	FrontProxyCA = "front-proxy-ca"
	// EtcdCA signs etcd's serving certificate and its clients' certificates.
	EtcdCA = "etcd-ca"

	APIServer              = "apiserver"
	APIServerKubeletClient = "apiserver-kubelet-client"
	// APIServerWebhookClient is the client certificate the API server
	// presents to admission webhooks (WebhookAdmissionConfiguration), which
	// fke's webhooks require.
	APIServerWebhookClient = "apiserver-webhook-client"
	FrontProxyClient       = "front-proxy-client"
	EtcdServer             = "etcd-server"
	// EtcdPeer is etcd's peer certificate (serving and client): the peer
	// port accepts only certificates of this name signed by the etcd CA.
	EtcdPeer            = "etcd-peer"
	APIServerEtcdClient = "apiserver-etcd-client"
	Admin               = "admin"
	ControllerManager   = "controller-manager"
	Scheduler           = "scheduler"
	// Manager is the client fke's own controllers use to talk to the tenant.
	Manager = "manager"
	// MetricsServer is metrics-server's serving certificate, for the name
	// the aggregator checks (MetricsServerServiceName).
	MetricsServer = "metrics-server"
	// MetricsServerClient is metrics-server's client certificate, for the
	// API server and the kubelets it scrapes.
	MetricsServerClient = "metrics-server-client"
	// GPUMetrics is the GPU metrics adapter's serving certificate, for the
	// name the aggregator checks (GPUMetricsServiceName).
	GPUMetrics = "gpu-metrics"
	// GPUMetricsClient is the GPU metrics adapter's client certificate.
	GPUMetricsClient = "gpu-metrics-client"
	// VPAWebhook is the VPA admission controller's serving certificate,
	// for the name the API server checks when it calls the webhook through
	// its Service (VPAWebhookServiceName).
	VPAWebhook = "vpa-webhook"
	// VPAClient is the client certificate of the VPA's three components.
	VPAClient = "vpa-client"
	// LoopbackKubelet is the serving certificate of a kubelet API served on
	// loopback for simulated nodes (kwok's), so that metrics-server, which
	// checks kubelets against the cluster CA, accepts it.
	LoopbackKubelet = "loopback-kubelet"
)

// File names in a Bundle.
const (
	CACertFile                     = CA + ".crt"
	CAKeyFile                      = CA + ".key"
	FrontProxyCACertFile           = FrontProxyCA + ".crt"
	FrontProxyCAKeyFile            = FrontProxyCA + ".key"
	EtcdCACertFile                 = EtcdCA + ".crt"
	EtcdCAKeyFile                  = EtcdCA + ".key"
	APIServerCertFile              = APIServer + ".crt"
	APIServerKeyFile               = APIServer + ".key"
	APIServerKubeletClientCertFile = APIServerKubeletClient + ".crt"
	APIServerKubeletClientKeyFile  = APIServerKubeletClient + ".key"
	APIServerWebhookClientCertFile = APIServerWebhookClient + ".crt"
	APIServerWebhookClientKeyFile  = APIServerWebhookClient + ".key"
	FrontProxyClientCertFile       = FrontProxyClient + ".crt"
	FrontProxyClientKeyFile        = FrontProxyClient + ".key"
	EtcdServerCertFile             = EtcdServer + ".crt"
	EtcdServerKeyFile              = EtcdServer + ".key"
	EtcdPeerCertFile               = EtcdPeer + ".crt"
	EtcdPeerKeyFile                = EtcdPeer + ".key"
	APIServerEtcdClientCertFile    = APIServerEtcdClient + ".crt"
	APIServerEtcdClientKeyFile     = APIServerEtcdClient + ".key"
	AdminCertFile                  = Admin + ".crt"
	AdminKeyFile                   = Admin + ".key"
	ControllerManagerCertFile      = ControllerManager + ".crt"
	ControllerManagerKeyFile       = ControllerManager + ".key"
	SchedulerCertFile              = Scheduler + ".crt"
	SchedulerKeyFile               = Scheduler + ".key"
	ManagerCertFile                = Manager + ".crt"
	ManagerKeyFile                 = Manager + ".key"
	MetricsServerCertFile          = MetricsServer + ".crt"
	MetricsServerKeyFile           = MetricsServer + ".key"
	MetricsServerClientCertFile    = MetricsServerClient + ".crt"
	MetricsServerClientKeyFile     = MetricsServerClient + ".key"
	GPUMetricsCertFile             = GPUMetrics + ".crt"
	GPUMetricsKeyFile              = GPUMetrics + ".key"
	GPUMetricsClientCertFile       = GPUMetricsClient + ".crt"
	GPUMetricsClientKeyFile        = GPUMetricsClient + ".key"
	VPAWebhookCertFile             = VPAWebhook + ".crt"
	VPAWebhookKeyFile              = VPAWebhook + ".key"
	VPAClientCertFile              = VPAClient + ".crt"
	VPAClientKeyFile               = VPAClient + ".key"
	// SAKeyFile is the service-account signing key (PKCS#8 PEM).
	SAKeyFile = "sa.key"
	// SAPubFile is the service-account public key (PKIX PEM).
	SAPubFile = "sa.pub"
)

// Subjects of the client certificates.
const (
	// MastersGroup is the group the API server's default RBAC binds to
	// cluster-admin.
	MastersGroup = "system:masters"

	AdminUser             = "kubernetes-admin"
	ControllerManagerUser = "system:kube-controller-manager"
	SchedulerUser         = "system:kube-scheduler"
	ManagerUser           = "fke-manager"
	// APIServerWebhookUser is the subject of the API server's webhook
	// client certificate: it has no group and no permission in the
	// cluster; fke's webhooks admit callers by it.
	APIServerWebhookUser = "fke:kube-apiserver-webhook-client"
	// MetricsServerUser is the user metrics-server acts as.
	MetricsServerUser = "fke:metrics-server"
	// MetricsServerServiceName is the DNS name under which the tenant's
	// aggregator reaches metrics-server: <Service>.<namespace>.svc.
	MetricsServerServiceName = "metrics-server.kube-system.svc"
	// VPAWebhookServiceName is the DNS name under which the tenant's API
	// server calls the VPA admission controller: <Service>.<namespace>.svc.
	VPAWebhookServiceName = "vpa-webhook.kube-system.svc"
	// VPAUser is the user the VPA's recommender, updater and admission
	// controller act as.
	VPAUser = "fke:vertical-pod-autoscaler"
	// GPUMetricsUser is the user the GPU metrics adapter acts as.
	GPUMetricsUser = "fke:gpu-metrics"
	// GPUMetricsServiceName is the DNS name under which the tenant's
	// aggregator reaches the GPU metrics adapter.
	GPUMetricsServiceName = "fke-gpu-metrics.kube-system.svc"
	// EtcdPeerCommonName is the subject of the etcd peer certificate, the
	// only one etcd's peer port accepts (--peer-cert-allowed-cn).
	EtcdPeerCommonName = "etcd-peer"
)

// RenewBefore is how long before expiry EnsureBundle re-issues a leaf.
const RenewBefore = 30 * 24 * time.Hour

// CertFile returns the name of the certificate file of the pair base.
func CertFile(base string) string { return base + ".crt" }

// KeyFile returns the name of the private-key file of the pair base.
func KeyFile(base string) string { return base + ".key" }

// ControlPlaneSpec says what the control-plane certificates must cover.
type ControlPlaneSpec struct {
	// ClusterName names the CAs; required.
	ClusterName string
	// APIServerDNSNames and APIServerIPs are added to the API server's
	// serving certificate, which always covers localhost, 127.0.0.1 and
	// kubernetes, kubernetes.default, kubernetes.default.svc and
	// kubernetes.default.svc.cluster.local. Add the first IP of the service
	// CIDR here.
	APIServerDNSNames []string
	APIServerIPs      []net.IP
	// EtcdDNSNames and EtcdIPs are added to etcd's serving certificate,
	// which always covers localhost and 127.0.0.1.
	EtcdDNSNames []string
	EtcdIPs      []net.IP
}

// Bundle holds every file a control plane needs as name -> PEM bytes (fits a
// Secret's data).
type Bundle map[string][]byte

// KeyPair parses the pair base (for example Admin) from the bundle.
func (b Bundle) KeyPair(base string) (*KeyPair, error) {
	certPEM, ok := b[CertFile(base)]
	if !ok {
		return nil, fmt.Errorf("bundle has no %s", CertFile(base))
	}
	keyPEM, ok := b[KeyFile(base)]
	if !ok {
		return nil, fmt.Errorf("bundle has no %s", KeyFile(base))
	}
	kp, err := ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", base, err)
	}
	return kp, nil
}

// leaf is one leaf certificate of a control plane.
type leaf struct {
	base string
	ca   string
	spec func(ControlPlaneSpec) CertSpec
}

var cas = []string{CA, FrontProxyCA, EtcdCA}

var leaves = []leaf{
	{APIServer, CA, func(s ControlPlaneSpec) CertSpec {
		return CertSpec{
			CommonName: "kube-apiserver",
			DNSNames: union([]string{"localhost", "kubernetes", "kubernetes.default",
				"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, s.APIServerDNSNames),
			IPs:    unionIPs([]net.IP{net.IPv4(127, 0, 0, 1)}, s.APIServerIPs),
			Usages: UsageServer,
		}
	}},
	{APIServerKubeletClient, CA, client("kube-apiserver-kubelet-client", MastersGroup)},
	{APIServerWebhookClient, CA, client(APIServerWebhookUser)},
	{Admin, CA, client(AdminUser, MastersGroup)},
	{ControllerManager, CA, client(ControllerManagerUser)},
	{Scheduler, CA, client(SchedulerUser)},
	{Manager, CA, client(ManagerUser, MastersGroup)},
	{FrontProxyClient, FrontProxyCA, client("front-proxy-client")},
	{MetricsServer, CA, func(ControlPlaneSpec) CertSpec {
		return CertSpec{CommonName: MetricsServerServiceName, DNSNames: []string{MetricsServerServiceName}, Usages: UsageServer}
	}},
	{MetricsServerClient, CA, client(MetricsServerUser)},
	{GPUMetrics, CA, func(ControlPlaneSpec) CertSpec {
		return CertSpec{CommonName: GPUMetricsServiceName, DNSNames: []string{GPUMetricsServiceName}, Usages: UsageServer}
	}},
	{GPUMetricsClient, CA, client(GPUMetricsUser)},
	{VPAWebhook, CA, func(ControlPlaneSpec) CertSpec {
		return CertSpec{CommonName: VPAWebhookServiceName, DNSNames: []string{VPAWebhookServiceName}, Usages: UsageServer}
	}},
	{VPAClient, CA, client(VPAUser)},
	{LoopbackKubelet, CA, func(ControlPlaneSpec) CertSpec {
		return CertSpec{CommonName: "loopback-kubelet", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usages: UsageServer}
	}},
	{EtcdServer, EtcdCA, func(s ControlPlaneSpec) CertSpec {
		return CertSpec{
			CommonName: "etcd-server",
			DNSNames:   union([]string{"localhost"}, s.EtcdDNSNames),
			IPs:        unionIPs([]net.IP{net.IPv4(127, 0, 0, 1)}, s.EtcdIPs),
			Usages:     UsageBoth,
		}
	}},
	{EtcdPeer, EtcdCA, func(s ControlPlaneSpec) CertSpec {
		return CertSpec{
			CommonName: EtcdPeerCommonName,
			// Members of a cluster reach each other by these names.
			DNSNames: union([]string{"localhost"}, s.EtcdDNSNames),
			IPs:      []net.IP{net.IPv4(127, 0, 0, 1)},
			Usages:   UsageBoth,
		}
	}},
	{APIServerEtcdClient, EtcdCA, client("kube-apiserver-etcd-client")},
}

func client(cn string, org ...string) func(ControlPlaneSpec) CertSpec {
	return func(ControlPlaneSpec) CertSpec {
		return CertSpec{CommonName: cn, Organization: org, Usages: UsageClient}
	}
}

// RequiredFiles returns the name of every file EnsureBundle puts in a bundle.
func RequiredFiles() []string {
	var out []string
	for _, base := range cas {
		out = append(out, CertFile(base), KeyFile(base))
	}
	for _, l := range leaves {
		out = append(out, CertFile(l.base), KeyFile(l.base))
	}
	return append(out, SAKeyFile, SAPubFile)
}

// EnsureBundle returns a bundle that contains every required file
// (RequiredFiles). It never modifies existing and keeps every valid entry of
// it, so the CAs and the service-account key never change once made. It
// creates a CA only when its pair is absent or unusable (unparsable, key not
// matching, not a CA, or expired); it re-issues a leaf that is missing,
// unparsable, not signed by its current CA, expiring within RenewBefore, or
// whose subject, usages or SANs no longer cover the spec. It derives sa.pub
// from sa.key when only the public half is missing or wrong. Files it does
// not know are kept. changed reports whether anything was added or replaced.
func EnsureBundle(existing Bundle, spec ControlPlaneSpec) (b Bundle, changed bool, err error) {
	if spec.ClusterName == "" {
		return nil, false, errors.New("ensuring PKI bundle: empty cluster name")
	}
	now := time.Now()
	b = maps.Clone(existing)
	if b == nil {
		b = Bundle{}
	}
	put := func(base string, kp *KeyPair) {
		b[CertFile(base)] = kp.CertPEM()
		b[KeyFile(base)] = kp.KeyPEM()
		changed = true
	}

	issuers := map[string]*KeyPair{}
	for _, base := range cas {
		ca, err := b.KeyPair(base)
		if err != nil || !usableCA(ca, now) {
			ca, err = NewCA(spec.ClusterName+"-"+base, DefaultCAValidity)
			if err != nil {
				return nil, false, fmt.Errorf("ensuring PKI bundle for %s: %w", spec.ClusterName, err)
			}
			put(base, ca)
		}
		issuers[base] = ca
	}

	for _, l := range leaves {
		ca := issuers[l.ca]
		want := l.spec(spec)
		if kp, err := b.KeyPair(l.base); err == nil && leafCurrent(kp.Cert, ca.Cert, want, now) {
			continue
		}
		kp, err := ca.Issue(want)
		if err != nil {
			return nil, false, fmt.Errorf("ensuring PKI bundle for %s: %w", spec.ClusterName, err)
		}
		put(l.base, kp)
	}

	saChanged, err := ensureServiceAccountKey(b)
	if err != nil {
		return nil, false, fmt.Errorf("ensuring PKI bundle for %s: %w", spec.ClusterName, err)
	}
	return b, changed || saChanged, nil
}

// usableCA reports whether ca can keep signing certificates.
func usableCA(ca *KeyPair, now time.Time) bool {
	c := ca.Cert
	return c.IsCA && c.BasicConstraintsValid && c.KeyUsage&x509.KeyUsageCertSign != 0 &&
		now.Before(c.NotAfter) && c.CheckSignatureFrom(c) == nil
}

// leafCurrent reports whether cert is signed by ca, valid for want's usages
// now, not due for renewal, and has want's subject and SANs.
func leafCurrent(cert, ca *x509.Certificate, want CertSpec, now time.Time) bool {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, u := range want.Usages.extKeyUsages() {
		opts := x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{u}}
		if _, err := cert.Verify(opts); err != nil {
			return false
		}
	}
	// A leaf that already ends with its CA cannot be improved by re-issuing.
	if cert.NotAfter.Sub(now) < RenewBefore && cert.NotAfter.Before(ca.NotAfter) {
		return false
	}
	if cert.Subject.CommonName != want.CommonName ||
		!slices.Equal(sorted(cert.Subject.Organization), sorted(want.Organization)) {
		return false
	}
	for _, name := range want.DNSNames {
		if !slices.ContainsFunc(cert.DNSNames, func(n string) bool { return strings.EqualFold(n, name) }) {
			return false
		}
	}
	for _, ip := range want.IPs {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// ensureServiceAccountKey keeps a parsable sa.key, rewriting sa.pub from it
// when needed, and creates both when sa.key is missing or unusable.
func ensureServiceAccountKey(b Bundle) (changed bool, err error) {
	key, keyErr := parsePrivateKeyPEM(b[SAKeyFile])
	if keyErr != nil {
		priv, pub, err := NewServiceAccountKey()
		if err != nil {
			return false, err
		}
		b[SAKeyFile], b[SAPubFile] = priv, pub
		return true, nil
	}
	if pub, err := parsePublicKeyPEM(b[SAPubFile]); err == nil {
		if k, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); ok && k.Equal(pub) {
			return false, nil
		}
	}
	pub, err := publicKeyPEM(key.Public())
	if err != nil {
		return false, fmt.Errorf("marshalling service-account public key: %w", err)
	}
	b[SAPubFile] = pub
	return true, nil
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func unionIPs(a, b []net.IP) []net.IP {
	out := slices.Clone(a)
	for _, ip := range b {
		if ip != nil && !slices.ContainsFunc(out, ip.Equal) {
			out = append(out, ip)
		}
	}
	return out
}
