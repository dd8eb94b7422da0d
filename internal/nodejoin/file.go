package nodejoin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Kind and API version of a bootstrap file.
const (
	BootstrapFileKind       = "NodeBootstrap"
	BootstrapFileAPIVersion = "fke.dev/v1alpha1"
)

// BootstrapFile is what `fke node join` consumes to join a host to a
// cluster (written by `fke node bootstrap-file`): where the API server is,
// its CA, a bootstrap token of a pool, and what the node's kubelet and
// kube-proxy need to know of the cluster. Its only secret is the token,
// which expires: kube-proxy's credential is no part of it (the node asks
// for one once its kubelet joined, see bootstrap.ProxyCertificate).
type BootstrapFile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Cluster is "namespace/name" of the Cluster.
	Cluster string `json:"cluster"`
	// Pool is the short name of the node pool the token belongs to.
	Pool string `json:"pool"`
	// Server is the API server URL nodes reach.
	Server string `json:"server"`
	// CertificateAuthorityData is the cluster CA (PEM).
	CertificateAuthorityData []byte `json:"certificateAuthorityData"`
	// Token is the bootstrap token ("id.secret").
	Token string `json:"token"`
	// TokenExpires is when Token expires (empty in files of older fke).
	TokenExpires *metav1.Time `json:"tokenExpires,omitempty"`
	// ClusterDNS is the cluster DNS address; PodCIDR the cluster's pod range.
	ClusterDNS string `json:"clusterDNS"`
	PodCIDR    string `json:"podCIDR"`
	// Registry is host:port of fke's registry as nodes reach it: the
	// node's containerd trusts it (plain HTTP) and mirrors it, and pulls
	// its sandbox image from it. Empty when fke runs no registry.
	Registry string `json:"registry,omitempty"`
}

// ParseBootstrapFile reads and validates a bootstrap file.
func ParseBootstrapFile(data []byte) (BootstrapFile, error) {
	var f BootstrapFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		if strings.Contains(err.Error(), `"kubeProxyKubeconfig"`) {
			return f, fmt.Errorf("reading the bootstrap file: it was written by an older fke, which put a kube-proxy certificate in it: write a new one with `fke node bootstrap-file`: %w", err)
		}
		return f, fmt.Errorf("reading the bootstrap file: %w", err)
	}
	return f, f.Validate()
}

// Validate says what is missing or wrong in f.
func (f BootstrapFile) Validate() error {
	var errs []error
	if f.Kind != BootstrapFileKind || f.APIVersion != BootstrapFileAPIVersion {
		errs = append(errs, fmt.Errorf("kind %q apiVersion %q: want %s %s (write it with `fke node bootstrap-file`)", f.Kind, f.APIVersion, BootstrapFileKind, BootstrapFileAPIVersion))
	}
	if u, err := url.Parse(f.Server); err != nil || u.Scheme != "https" || u.Port() == "" {
		errs = append(errs, fmt.Errorf("server %q: want an https URL with a port", f.Server))
	}
	if len(f.CertificateAuthorityData) == 0 {
		errs = append(errs, errors.New("certificateAuthorityData is empty"))
	}
	if f.Token == "" || f.Pool == "" || f.Cluster == "" {
		errs = append(errs, errors.New("token, pool and cluster are required"))
	}
	if _, err := netip.ParsePrefix(f.PodCIDR); err != nil {
		errs = append(errs, fmt.Errorf("podCIDR %q: %w", f.PodCIDR, err))
	}
	if _, err := netip.ParseAddr(f.ClusterDNS); err != nil {
		errs = append(errs, fmt.Errorf("clusterDNS %q: %w", f.ClusterDNS, err))
	}
	if f.Registry != "" {
		if host, port, err := net.SplitHostPort(f.Registry); err != nil || host == "" || port == "" {
			errs = append(errs, fmt.Errorf("registry %q: want host:port", f.Registry))
		}
	}
	return errors.Join(errs...)
}

// Marshal renders f as YAML.
func (f BootstrapFile) Marshal() ([]byte, error) {
	f.APIVersion, f.Kind = BootstrapFileAPIVersion, BootstrapFileKind
	return yaml.Marshal(f)
}

// StaticCredentials are the credentials of a bootstrap file: a bootstrap
// kubeconfig for the kubelet, none for kube-proxy (its node asks for it).
type StaticCredentials struct {
	Kubelet []byte // bootstrap kubeconfig
}

// TokenID returns the public part of the token ("id" of "id.secret").
func (f BootstrapFile) TokenID() string {
	id, _, _ := strings.Cut(f.Token, ".")
	return id
}

// KubeletKubeconfig returns the bootstrap kubeconfig.
func (c StaticCredentials) KubeletKubeconfig(_ context.Context, _, _ string) ([]byte, bool, error) {
	return c.Kubelet, true, nil
}

// ProxyKubeconfig returns nil: the node asks for kube-proxy's certificate.
func (c StaticCredentials) ProxyKubeconfig(context.Context) ([]byte, error) { return nil, nil }
