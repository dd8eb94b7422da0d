package admission

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/pki"
)

// ConfigurationName names the ValidatingWebhookConfiguration fke-manager installs.
const ConfigurationName = "fke.dev"

// Files in the certificate directory: the CA fke keeps for the webhook and
// the serving certificate it signs (tls.crt and tls.key are the names
// controller-runtime's webhook server loads).
const (
	CACertFile  = "ca.crt"
	caKeyFile   = "ca.key"
	TLSCertFile = "tls.crt"
	tlsKeyFile  = "tls.key"
)

// renewBefore is how long before it expires the serving certificate is replaced.
const renewBefore = 30 * 24 * time.Hour

// EnsureCertificates keeps a CA and a serving certificate for host (an IP
// address or DNS name) in dir, each key 0600, creating or renewing what is
// missing, unusable or about to expire. It returns the CA certificate (PEM),
// the caBundle of the webhook configuration.
func EnsureCertificates(dir, host string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	now := time.Now()
	ca, err := loadPair(dir, CACertFile, caKeyFile)
	if err != nil || !ca.Cert.IsCA || now.Add(renewBefore).After(ca.Cert.NotAfter) {
		if ca, err = pki.NewCA("fke-webhook-ca", 0); err != nil {
			return nil, err
		}
		if err := writePair(dir, CACertFile, caKeyFile, ca); err != nil {
			return nil, err
		}
	}
	spec := pki.CertSpec{CommonName: "fke-manager-webhook", Usages: pki.UsageServer}
	if ip := net.ParseIP(host); ip != nil {
		spec.IPs = []net.IP{ip}
	} else {
		spec.DNSNames = []string{host}
	}
	leaf, err := loadPair(dir, TLSCertFile, tlsKeyFile)
	if err != nil || !servingFor(leaf.Cert, ca.Cert, host, now) {
		if leaf, err = ca.Issue(spec); err != nil {
			return nil, err
		}
		if err := writePair(dir, TLSCertFile, tlsKeyFile, leaf); err != nil {
			return nil, err
		}
	}
	return ca.CertPEM(), nil
}

// servingFor reports whether cert, signed by ca, serves host now and for
// longer than renewBefore.
func servingFor(cert, ca *x509.Certificate, host string, now time.Time) bool {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err := cert.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, CurrentTime: now.Add(renewBefore), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err == nil
}

func loadPair(dir, certFile, keyFile string) (*pki.KeyPair, error) {
	c, err := os.ReadFile(filepath.Join(dir, certFile))
	if err != nil {
		return nil, err
	}
	k, err := os.ReadFile(filepath.Join(dir, keyFile))
	if err != nil {
		return nil, err
	}
	return pki.ParseKeyPair(c, k)
}

// writePair writes the key, then the certificate, each 0600 through a
// temporary file, so that a reader never sees a half-written file.
func writePair(dir, certFile, keyFile string, kp *pki.KeyPair) error {
	for _, f := range []struct {
		name string
		data []byte
	}{{keyFile, kp.KeyPEM()}, {certFile, kp.CertPEM()}} {
		tmp := filepath.Join(dir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", f.name, err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			return errors.Join(fmt.Errorf("writing %s: %w", f.name, err), os.Remove(tmp))
		}
	}
	return nil
}

// Configuration returns the ValidatingWebhookConfiguration that sends
// Cluster and NodePool creates and spec changes to the webhook at baseURL
// (https://host:port), trusted through caPEM. failurePolicy is Fail: when
// fke-manager is down, these changes wait for it rather than go unchecked.
// Changes of metadata or status only (finalizers, the scale subresource)
// are not sent.
func Configuration(baseURL string, caPEM []byte) *admissionregistrationv1.ValidatingWebhookConfiguration {
	hook := func(name, resource, path string) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name:         name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(baseURL + path), CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{fkev1.GroupVersion.Group}, APIVersions: []string{fkev1.GroupVersion.Version},
					Resources: []string{resource}, Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "create-or-spec-change",
				Expression: "request.operation == 'CREATE' || object.spec != oldObject.spec",
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			hook("clusters.fke.dev", "clusters", PathCluster),
			hook("nodepools.fke.dev", "nodepools", PathNodePool),
		},
	}
}

// EnsureConfiguration creates want or updates the installed configuration to it.
func EnsureConfiguration(ctx context.Context, c client.Client, want *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	have := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	err := c.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want); err != nil {
			return fmt.Errorf("creating webhook configuration %s: %w", want.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading webhook configuration %s: %w", want.Name, err)
	}
	have.Webhooks = want.Webhooks
	if err := c.Update(ctx, have); err != nil {
		return fmt.Errorf("updating webhook configuration %s: %w", want.Name, err)
	}
	return nil
}

// RemoveConfiguration deletes the installed configuration, if any: a manager
// that serves no webhook must not leave the API server calling one that is
// gone (failurePolicy Fail would refuse every change).
func RemoveConfiguration(ctx context.Context, c client.Client) error {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName}}
	if err := c.Delete(ctx, cfg); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing webhook configuration %s: %w", ConfigurationName, err)
	}
	return nil
}
