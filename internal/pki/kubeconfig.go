package pki

import (
	"errors"
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig returns a kubeconfig with one cluster (clusterName, at server,
// trusting caPEM), one user (user, authenticating with certPEM and keyPEM)
// and one context, "<user>@<clusterName>", which is current. All credentials
// are embedded, so the file works wherever it is copied.
func Kubeconfig(clusterName, server string, caPEM, certPEM, keyPEM []byte, user string) ([]byte, error) {
	switch {
	case clusterName == "":
		return nil, errors.New("writing kubeconfig: empty cluster name")
	case server == "":
		return nil, fmt.Errorf("writing kubeconfig for %s: empty server", clusterName)
	case user == "":
		return nil, fmt.Errorf("writing kubeconfig for %s: empty user", clusterName)
	}
	contextName := user + "@" + clusterName
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{
		Server:                   server,
		CertificateAuthorityData: caPEM,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: certPEM,
		ClientKeyData:         keyPEM,
	}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	cfg.CurrentContext = contextName
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing kubeconfig for %s: %w", clusterName, err)
	}
	return data, nil
}
