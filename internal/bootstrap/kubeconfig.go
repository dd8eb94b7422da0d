package bootstrap

import (
	"errors"
	"fmt"
	"net/url"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	tokenutil "k8s.io/cluster-bootstrap/token/util"
)

// BootstrapKubeconfig renders a kubeconfig for server (an https URL) that
// trusts caPEM and authenticates with the bootstrap token ("id.secret"); the
// kubelet's --bootstrap-kubeconfig.
func BootstrapKubeconfig(server string, caPEM []byte, token string) ([]byte, error) {
	u, err := url.Parse(server)
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "":
		return nil, fmt.Errorf("bootstrap kubeconfig: server %q must be an https URL such as https://172.29.0.1:6443", server)
	case len(caPEM) == 0:
		return nil, errors.New("bootstrap kubeconfig: empty CA certificate")
	case !tokenutil.IsValidBootstrapToken(token):
		return nil, errors.New("bootstrap kubeconfig: token must have the form [a-z0-9]{6}.[a-z0-9]{16}")
	}
	const name, user = "default", "kubelet-bootstrap"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user}
	cfg.CurrentContext = name
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("bootstrap kubeconfig: %w", err)
	}
	return out, nil
}
