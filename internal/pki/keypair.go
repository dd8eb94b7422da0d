// Package pki creates and checks the certificates, keys and kubeconfigs that
// a tenant Kubernetes control plane needs: a cluster CA, a front-proxy CA, an
// etcd CA, the serving and client certificates signed by them, and the
// service-account signing key.
//
// Every key is ECDSA P-256: fast to generate, and accepted by kube-apiserver,
// etcd, kubelet and Go clients (service-account tokens are signed ES256).
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

const (
	// DefaultCAValidity is how long a CA made by EnsureBundle is valid.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// DefaultLeafValidity is how long a leaf certificate is valid when
	// CertSpec.Validity is zero.
	DefaultLeafValidity = 365 * 24 * time.Hour
	// clockSkew is how far in the past NotBefore is set, so that a
	// certificate is valid on machines whose clock is slightly behind.
	clockSkew = time.Hour
)

// PEM block types.
const (
	pemCertificate   = "CERTIFICATE"
	pemPrivateKey    = "PRIVATE KEY"
	pemECPrivateKey  = "EC PRIVATE KEY"
	pemRSAPrivateKey = "RSA PRIVATE KEY"
	pemPublicKey     = "PUBLIC KEY"
)

// KeyPair is a certificate with its private key.
type KeyPair struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// Usage says what a leaf certificate may be used for.
type Usage int

const (
	// UsageServer allows TLS server authentication (ExtKeyUsageServerAuth).
	UsageServer Usage = 1 << iota
	// UsageClient allows TLS client authentication (ExtKeyUsageClientAuth).
	UsageClient
	// UsageBoth allows both server and client authentication.
	UsageBoth = UsageServer | UsageClient
)

// extKeyUsages returns the x509 extended key usages for u.
func (u Usage) extKeyUsages() []x509.ExtKeyUsage {
	var out []x509.ExtKeyUsage
	if u&UsageServer != 0 {
		out = append(out, x509.ExtKeyUsageServerAuth)
	}
	if u&UsageClient != 0 {
		out = append(out, x509.ExtKeyUsageClientAuth)
	}
	return out
}

// CertSpec describes a leaf certificate for Issue.
type CertSpec struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	// Usages must be UsageServer, UsageClient or UsageBoth.
	Usages Usage
	// Validity is the lifetime from now; zero means DefaultLeafValidity. The
	// certificate never outlives its CA.
	Validity time.Duration
}

// CertPEM returns the certificate PEM-encoded.
func (k *KeyPair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: k.Cert.Raw})
}

// KeyPEM returns the private key as a PKCS#8 "PRIVATE KEY" PEM block, which
// kube-apiserver, etcd, kubelet and Go's crypto/tls all load. It returns nil
// only if the key cannot be marshalled, which cannot happen for the keys this
// package creates.
func (k *KeyPair) KeyPEM() []byte {
	der, err := x509.MarshalPKCS8PrivateKey(k.Key)
	if err != nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der})
}

// TLSCertificate returns the pair as a tls.Certificate for a tls.Config.
func (k *KeyPair) TLSCertificate() tls.Certificate {
	return tls.Certificate{
		Certificate: [][]byte{k.Cert.Raw},
		PrivateKey:  k.Key,
		Leaf:        k.Cert,
	}
}

// ParseKeyPair parses a PEM certificate (the first CERTIFICATE block) and a
// PEM private key (PKCS#8, SEC 1 "EC PRIVATE KEY" or PKCS#1), and checks that
// the key belongs to the certificate.
func ParseKeyPair(certPEM, keyPEM []byte) (*KeyPair, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, err
	}
	key, err := parsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("private key does not match certificate %q", cert.Subject.CommonName)
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

func parseCertPEM(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no CERTIFICATE PEM block found")
		}
		if block.Type != pemCertificate {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing certificate: %w", err)
		}
		return cert, nil
	}
}

func parsePrivateKeyPEM(data []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no private key PEM block found")
		}
		var (
			key any
			err error
		)
		switch block.Type {
		case pemPrivateKey:
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case pemECPrivateKey:
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case pemRSAPrivateKey:
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", block.Type, err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("private key of type %T cannot sign", key)
		}
		return signer, nil
	}
}

// NewCA creates a self-signed CA valid for validity (DefaultCAValidity when
// zero) that may sign leaf certificates only (MaxPathLen 0).
func NewCA(commonName string, validity time.Duration) (*KeyPair, error) {
	if commonName == "" {
		return nil, errors.New("creating CA: empty common name")
	}
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("creating CA %s: %w", commonName, err)
	}
	tmpl, err := baseTemplate(commonName, nil, key.Public(), validity)
	if err != nil {
		return nil, fmt.Errorf("creating CA %s: %w", commonName, err)
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.MaxPathLen = 0
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	tmpl.AuthorityKeyId = tmpl.SubjectKeyId
	kp, err := sign(tmpl, tmpl, key.Public(), key, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA %s: %w", commonName, err)
	}
	return kp, nil
}

// Issue signs a leaf certificate described by spec with the CA ca, using a
// fresh key.
func (ca *KeyPair) Issue(spec CertSpec) (*KeyPair, error) {
	if spec.CommonName == "" {
		return nil, errors.New("issuing certificate: empty common name")
	}
	if spec.Usages&UsageBoth == 0 {
		return nil, fmt.Errorf("issuing certificate %s: no usage", spec.CommonName)
	}
	if !ca.Cert.IsCA {
		return nil, fmt.Errorf("issuing certificate %s: %q is not a CA", spec.CommonName, ca.Cert.Subject.CommonName)
	}
	validity := spec.Validity
	if validity <= 0 {
		validity = DefaultLeafValidity
	}
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("issuing certificate %s: %w", spec.CommonName, err)
	}
	tmpl, err := baseTemplate(spec.CommonName, spec.Organization, key.Public(), validity)
	if err != nil {
		return nil, fmt.Errorf("issuing certificate %s: %w", spec.CommonName, err)
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = spec.Usages.extKeyUsages()
	tmpl.DNSNames = append([]string(nil), spec.DNSNames...)
	for _, ip := range spec.IPs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, append(net.IP(nil), ip...))
	}
	tmpl.AuthorityKeyId = ca.Cert.SubjectKeyId
	kp, err := sign(tmpl, ca.Cert, key.Public(), ca.Key, key)
	if err != nil {
		return nil, fmt.Errorf("issuing certificate %s: %w", spec.CommonName, err)
	}
	return kp, nil
}

// NewServiceAccountKey creates the key kube-apiserver signs service-account
// tokens with (--service-account-signing-key-file, PKCS#8 PEM) and its public
// half (--service-account-key-file, PKIX "PUBLIC KEY" PEM).
func NewServiceAccountKey() (privatePEM, publicPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("creating service-account key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("marshalling service-account key: %w", err)
	}
	pub, err := publicKeyPEM(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("marshalling service-account public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), pub, nil
}

func publicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPublicKey, Bytes: der}), nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// baseTemplate returns a certificate template with a random 128-bit serial,
// the subject, validity window and subject key identifier set.
func baseTemplate(cn string, org []string, pub crypto.PublicKey, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	ski, err := subjectKeyID(pub)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: append([]string(nil), org...)},
		NotBefore:    now.Add(-clockSkew).UTC(),
		NotAfter:     now.Add(validity).UTC(),
		SubjectKeyId: ski,
	}, nil
}

// subjectKeyID returns the SHA-256 of the subjectPublicKey bit string
// truncated to 160 bits (RFC 7093, section 2, method 1).
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("marshalling public key: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &spki); err != nil {
		return nil, fmt.Errorf("parsing public key: %w", err)
	}
	sum := sha256.Sum256(spki.PublicKey.Bytes)
	return sum[:20], nil
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, parentKey crypto.Signer, key crypto.Signer) (*KeyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, fmt.Errorf("signing certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing signed certificate: %w", err)
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

func parsePublicKeyPEM(data []byte) (crypto.PublicKey, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no PUBLIC KEY PEM block found")
		}
		if block.Type != pemPublicKey {
			continue
		}
		pub, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing public key: %w", err)
		}
		return pub, nil
	}
}
