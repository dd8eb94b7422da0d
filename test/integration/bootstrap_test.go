package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"fke.dev/fke/internal/bootstrap"
	"fke.dev/fke/internal/nodejoin"
	"fke.dev/fke/test/testenv"
)

// csrFor asks, through c, for a certificate of signer with the given
// subject, usages and SANs, and returns the CSR's name and private key.
func csrFor(t *testing.T, c kubernetes.Interface, signer, cn string, usages []certv1.KeyUsage, dns []string, ips []net.IP) (string, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}, DNSNames: dns, IPAddresses: ips,
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := c.CertificatesV1().CertificateSigningRequests().Create(context.Background(), &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"},
		Spec: certv1.CertificateSigningRequestSpec{
			Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), SignerName: signer, Usages: usages,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating CSR for %s: %v", cn, err)
	}
	return csr.Name, key
}

// waitCSR waits until the CSR name is decided and, when approved, signed; it
// returns the decision's condition and the certificate.
func waitCSR(t *testing.T, c kubernetes.Interface, name string) (certv1.CertificateSigningRequestCondition, []byte) {
	t.Helper()
	var cond certv1.CertificateSigningRequestCondition
	var cert []byte
	testenv.Eventually(t, 30*time.Second, "CSR "+name+" decided", func() error {
		csr, err := c.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cd := range csr.Status.Conditions {
			if cd.Type == certv1.CertificateDenied {
				cond = cd
				return nil
			}
			if cd.Type == certv1.CertificateApproved && len(csr.Status.Certificate) > 0 {
				cond, cert = cd, csr.Status.Certificate
				return nil
			}
		}
		return fmt.Errorf("conditions %+v, certificate %d bytes", csr.Status.Conditions, len(csr.Status.Certificate))
	})
	return cond, cert
}

func verifies(t *testing.T, certPEM, caPEM []byte, usage x509.ExtKeyUsage) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatalf("certificate is not PEM: %q", certPEM)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		t.Fatalf("certificate for %s does not verify against the cluster CA: %v", cert.Subject, err)
	}
	return cert
}

// TestNodeJoinsByTLSBootstrap walks a node's join against a real tenant:
// a bootstrap token gets a client certificate approved and signed by the
// tenant's kube-controller-manager, the node's serving certificate is
// approved by fke only for its own name and address, an expired token is
// refused, and a node's credentials cannot change another Node; the node
// gets its kube-proxy's short-lived certificate with its own credential;
// `fke node bootstrap-file --ttl` hands out a token that lives the TTL and
// no other credential; `fke node join` with a file that cannot work fails
// within seconds, saying why.
func TestNodeJoinsByTLSBootstrap(t *testing.T) {
	e := testenv.Up(t)
	e.MustRun("cluster", "create", "boot", "--wait")
	ctx := context.Background()
	admin := e.Tenant("boot")
	adminCfg := e.TenantConfig("boot")
	ca := adminCfg.TLSClientConfig.CAData

	testenv.Eventually(t, 30*time.Second, "bootstrap RBAC installed", func() error {
		_, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, bootstrap.BindingAutoApproveClient, metav1.GetOptions{})
		return err
	})
	token, expires, err := bootstrap.EnsureToken(ctx, admin, "cpu", 15*time.Minute, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if time.Until(expires) < 14*time.Minute {
		t.Fatalf("token expires at %s", expires)
	}
	kc, err := bootstrap.BootstrapKubeconfig(adminCfg.Host, ca, token)
	if err != nil {
		t.Fatal(err)
	}
	bootCfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	booter := kubernetes.NewForConfigOrDie(bootCfg)
	// The API server learns a new token from its cache of kube-system's
	// Secrets, a moment after the Secret is made (a kubelet retries its
	// bootstrap as long).
	testenv.Eventually(t, 30*time.Second, "bootstrap token accepted", func() error {
		_, err := booter.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	})

	// 1. Client certificate through the bootstrap token.
	const node = "boot-n1"
	name, key := csrFor(t, booter, certv1.KubeAPIServerClientKubeletSignerName, "system:node:"+node,
		[]certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth}, nil, nil)
	cond, certPEM := waitCSR(t, admin, name)
	if cond.Type != certv1.CertificateApproved {
		t.Fatalf("node client CSR %s: %+v, want approved by kube-controller-manager", name, cond)
	}
	verifies(t, certPEM, ca, x509.ExtKeyUsageClientAuth)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	nodeCfg := rest.AnonymousClientConfig(adminCfg)
	nodeCfg.TLSClientConfig.CertData = certPEM
	nodeCfg.TLSClientConfig.KeyData = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	nodeClient := kubernetes.NewForConfigOrDie(nodeCfg)

	// The node registers itself with its address, as a kubelet does.
	if _, err := nodeClient.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node creating its own Node: %v", err)
	}
	addresses := `{"status":{"addresses":[{"type":"InternalIP","address":"172.29.0.10"},{"type":"Hostname","address":"` + node + `"}]}}`
	if _, err := nodeClient.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(addresses), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("node updating its own status: %v", err)
	}

	// 2. Serving certificates: approved for its own name and IP only.
	serving := []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}
	good, _ := csrFor(t, nodeClient, certv1.KubeletServingSignerName, "system:node:"+node, serving, []string{node}, []net.IP{net.ParseIP("172.29.0.10")})
	foreign, _ := csrFor(t, nodeClient, certv1.KubeletServingSignerName, "system:node:"+node, serving, []string{"boot-n2"}, []net.IP{net.ParseIP("172.29.0.10")})
	wrongIP, _ := csrFor(t, nodeClient, certv1.KubeletServingSignerName, "system:node:"+node, serving, []string{node}, []net.IP{net.ParseIP("172.29.0.99")})
	cond, certPEM = waitCSR(t, admin, good)
	if cond.Type != certv1.CertificateApproved || cond.Reason != bootstrap.ReasonNodeVerified {
		t.Fatalf("serving CSR for the node's own name and IP: %+v", cond)
	}
	if c := verifies(t, certPEM, ca, x509.ExtKeyUsageServerAuth); c.DNSNames[0] != node {
		t.Fatalf("serving certificate names %v", c.DNSNames)
	}
	for what, csr := range map[string]string{"a foreign node's name": foreign, "a wrong IP": wrongIP} {
		if cond, _ := waitCSR(t, admin, csr); cond.Type != certv1.CertificateDenied || cond.Reason != bootstrap.ReasonNodeMismatch {
			t.Errorf("serving CSR with %s: %+v, want denied (%s)", what, cond, bootstrap.ReasonNodeMismatch)
		}
	}

	// 3. NodeRestriction: the node cannot change another Node.
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "boot-n2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = nodeClient.CoreV1().Nodes().Patch(ctx, "boot-n2", types.MergePatchType, []byte(`{"metadata":{"labels":{"stolen":"yes"}}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("node %s patching boot-n2: %v, want Forbidden", node, err)
	}

	// 4. An expired token is refused authentication.
	expired := bootstrap.TokenSecret(bootstrap.Token{ID: "expird", Secret: "0123456789abcdef", Expires: time.Now().Add(-time.Minute)}, "cpu")
	if _, err := admin.CoreV1().Secrets("kube-system").Create(ctx, expired, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kc, err = bootstrap.BootstrapKubeconfig(adminCfg.Host, ca, "expird.0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	expiredCfg, _ := clientcmd.RESTConfigFromKubeConfig(kc)
	_, err = kubernetes.NewForConfigOrDie(expiredCfg).CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Fatalf("expired token: %v, want Unauthorized", err)
	}
	// The valid token still works (the refusal was the expiry, not the setup).
	if _, err := booter.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("valid token: %v", err)
	}

	t.Run("a node's kube-proxy gets a short-lived certificate through the node", func(t *testing.T) {
		testProxyCertificate(t, adminCfg, nodeCfg, node)
	})
	var bf nodejoin.BootstrapFile
	t.Run("bootstrap-file --ttl hands out a token of that lifetime and no other credential", func(t *testing.T) {
		bf = testBootstrapFileTTL(t, e.For(t), admin, token)
	})
	t.Run("fke node join with a file that cannot work fails within seconds, saying why", func(t *testing.T) {
		if bf.Token == "" {
			t.Skip("no bootstrap file")
		}
		testJoinFailsFast(t, e.For(t), adminCfg, bf)
	})
}
