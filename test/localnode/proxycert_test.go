package localnode

import (
	"crypto/tls"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"fke.dev/fke/internal/bootstrap"
	localnodes "fke.dev/fke/internal/nodeprovider/local"
)

// checkProxyCertificate: the kube-proxy of the node in dir authenticates
// with the certificate the node asked for through its own kubelet's
// credential (bootstrap.ProxyCertificate): fke:kube-proxy:<node>, living a
// day at most, read from the node's files rather than handed to it.
func checkProxyCertificate(t *testing.T, dir, node string) {
	t.Helper()
	l := localnodes.Layout{Dir: dir}
	kc, err := clientcmd.LoadFromFile(l.ProxyKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range kc.AuthInfos {
		if len(auth.ClientCertificateData) > 0 || auth.ClientCertificate != bootstrap.ProxyCertPath(l.ProxyCertDir()) {
			t.Errorf("kube-proxy of node %s authenticates with %+v, want the certificate file %s", node, auth, bootstrap.ProxyCertPath(l.ProxyCertDir()))
		}
	}
	data, err := os.ReadFile(bootstrap.ProxyCertPath(l.ProxyCertDir()))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(data, data)
	if err != nil {
		t.Fatal(err)
	}
	cert := pair.Leaf
	if cert.Subject.CommonName != bootstrap.ProxyUser(node) || strings.Join(cert.Subject.Organization, ",") != bootstrap.ProxyGroup {
		t.Errorf("kube-proxy certificate of node %s is of %s, want CN=%s, O=%s", node, cert.Subject, bootstrap.ProxyUser(node), bootstrap.ProxyGroup)
	}
	if life := time.Until(cert.NotAfter); life > bootstrap.MaxProxyCertLifetime {
		t.Errorf("kube-proxy certificate of node %s lives %s more, want at most %s", node, life, bootstrap.MaxProxyCertLifetime)
	}
}
