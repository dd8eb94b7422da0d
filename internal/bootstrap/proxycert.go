package bootstrap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/certificate"
	"k8s.io/klog/v2"
)

// proxyCertPrefix names kube-proxy's certificate files in their directory:
// kube-proxy-client-<time>.pem, and kube-proxy-client-current.pem linking
// to the newest.
const proxyCertPrefix = "kube-proxy-client"

// ProxyCertPath is the file in dir holding kube-proxy's current certificate
// and its key (PEM), which ProxyCertificate keeps.
func ProxyCertPath(dir string) string { return filepath.Join(dir, proxyCertPrefix+"-current.pem") }

// ProxyCertKubeconfig renders kube-proxy's kubeconfig for server, trusting
// caPEM and verifying serverName (empty: server's host), with the
// certificate and key of ProxyCertPath(dir) as files: kube-proxy's client
// reads them again when they change, so a renewed certificate is used
// without a restart.
func ProxyCertKubeconfig(server, serverName string, caPEM []byte, dir string) ([]byte, error) {
	const name = "default"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM, TLSServerName: serverName}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: ProxyCertPath(dir), ClientKey: ProxyCertPath(dir)}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy kubeconfig: %w", err)
	}
	return out, nil
}

// ProxyCertificate keeps the client certificate of one node's kube-proxy
// (see ProxyUser) in a directory: it asks for one with the node's own
// credentials when there is none, and for a new one when 70-90% of the
// current one's life has passed, as the kubelet renews its own
// (client-go's certificate manager).
type ProxyCertificate struct {
	m certificate.Manager
}

// StartProxyCertificate starts keeping the certificate of node's kube-proxy
// in dir until ctx ends. Each request is made with the credentials of the
// kubeconfig file kubeletKubeconfig, read again for each (the kubelet
// renews its certificate too); it must hold system:node:<node>'s. lifetime
// is asked for in the requests (at most MaxProxyCertLifetime; the signer
// gives no less than ten minutes). It returns at once; Wait waits for a
// certificate.
func StartProxyCertificate(ctx context.Context, node, kubeletKubeconfig, dir string, lifetime time.Duration, log *slog.Logger) (*ProxyCertificate, error) {
	if lifetime <= 0 || lifetime > MaxProxyCertLifetime {
		return nil, fmt.Errorf("kube-proxy certificate of node %s: lifetime %s must be positive and at most %s", node, lifetime, MaxProxyCertLifetime)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kube-proxy certificate of node %s: %w", node, err)
	}
	logger := logr.FromSlogHandler(log.With("node", node, "certificate", "kube-proxy").Handler())
	store, err := certificate.NewFileStoreWithLogger(logger.V(1), proxyCertPrefix, dir, dir, "", "")
	if err != nil {
		return nil, fmt.Errorf("kube-proxy certificate store of node %s: %w", node, err)
	}
	mctx := klog.NewContext(ctx, logger)
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) {
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeletKubeconfig)
			if err != nil {
				return nil, fmt.Errorf("the kubelet's kubeconfig: %w", err)
			}
			cfg.UserAgent = "fke-node/kube-proxy-certificate"
			return kubernetes.NewForConfig(cfg)
		},
		Template: &x509.CertificateRequest{Subject: pkix.Name{CommonName: ProxyUser(node), Organization: []string{ProxyGroup}}},
		// ECDSA keys (the manager's default): no key encipherment.
		Usages:                       []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth},
		SignerName:                   certv1.KubeAPIServerClientSignerName,
		RequestedCertificateLifetime: &lifetime,
		CertificateStore:             store,
		Name:                         "kube-proxy",
		Ctx:                          &mctx,
	})
	if err != nil {
		return nil, fmt.Errorf("kube-proxy certificate of node %s: %w", node, err)
	}
	m.Start()
	return &ProxyCertificate{m: m}, nil
}

// Current returns the current certificate, nil before the first.
func (p *ProxyCertificate) Current() *tls.Certificate { return p.m.Current() }

// Wait returns once there is a certificate, or ctx's error when ctx ends
// first (a node's CSR waits for fke's approver, which waits for the Node
// to register). It polls every interval.
func (p *ProxyCertificate) Wait(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for p.m.Current() == nil {
		select {
		case <-ctx.Done():
			return errors.Join(errors.New("no kube-proxy certificate yet: its CSR waits for approval by fke"), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
