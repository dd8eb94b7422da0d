package controlplane

import (
	"fmt"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AdmissionConfig configures the API server's webhook admission plugins
// (--admission-control-config-file) to read how to authenticate to
// webhooks from kubeconfig (see WebhookClientKubeconfig).
func AdmissionConfig(kubeconfig string) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n")
	for _, plugin := range []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"} {
		b.WriteString("- name: " + plugin + "\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n" +
			"    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: " + kubeconfig + "\n")
	}
	return []byte(b.String())
}

// WebhookClientKubeconfig is the kubeconfig the API server reads the
// credentials for calling admission webhooks from: one user, "*" (every
// webhook host; the API server reads the file once at start, before an
// addon's port may be known), with the webhook client certificate at
// certFile and its key at keyFile. Only a webhook that asks for a client
// certificate gets it (the certificate: its key never leaves the API
// server), and it grants nothing in the cluster.
func WebhookClientKubeconfig(certFile, keyFile string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos["*"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the webhook client kubeconfig: %w", err)
	}
	return data, nil
}
