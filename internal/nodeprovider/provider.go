// Package nodeprovider defines how worker nodes are made. Implementations:
// kwok/ (simulated nodes), local/ (real nodes on this machine: kubelet and
// containerd in their own namespaces), fake/ (unit tests).
// The shape follows Karpenter's CloudProvider.
package nodeprovider

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// Cluster is what a provider needs to know of a tenant cluster.
type Cluster struct {
	// Key is "namespace/name" of the Cluster object.
	Key string
	// Name is the Cluster's name.
	Name string
	// Config reaches the tenant API server with admin rights.
	Config *rest.Config
	// PodCIDR is the cluster's pod range.
	PodCIDR string
	// ServiceCIDR is the cluster's Service range.
	ServiceCIDR string
	// Version is the control plane's Kubernetes version (v1.37.2).
	Version string
	// Join is what a real node needs to join the cluster; nil when the
	// cluster cannot take real nodes. Providers that register Nodes
	// themselves (kwok, fake) ignore it.
	Join *Join
	// LoopbackKubeletCert returns a serving certificate and key (PEM)
	// signed by the cluster CA for 127.0.0.1, for a provider that serves
	// the kubelet API of simulated nodes on loopback (kwok), so that
	// clients checking kubelets against the cluster CA (metrics-server)
	// accept it. Nil: such a provider serves a self-signed certificate.
	LoopbackKubeletCert func(ctx context.Context) (certPEM, keyPEM []byte, err error)
	// Hosted reports that the cluster's control plane runs as workloads of
	// a management cluster (runtime hosted): what a provider runs for the
	// cluster (kwok) runs there too, next to it, not as a child process of
	// the manager.
	Hosted bool
}

// Join is what a real node needs to join a cluster, as kubeadm's join
// configuration: where the API server is, how to trust it, and a credential.
type Join struct {
	// Server is the API server URL nodes reach, e.g. https://172.29.0.1:6443.
	Server string
	// TLSServerName is the name nodes verify in the API server's serving
	// certificate; empty means the host of Server.
	TLSServerName string
	// CAPEM is the cluster CA (PEM).
	CAPEM []byte
	// DNSIP is the cluster DNS Service's address, given to the kubelets.
	DNSIP string
	// Credentials issues the nodes' credentials.
	Credentials Credentials
}

// Credentials issues what the nodes of one cluster present to its API server.
type Credentials interface {
	// KubeletKubeconfig returns the kubeconfig the kubelet of node nodeName
	// of pool starts with. With bootstrap true it is a bootstrap-token
	// kubeconfig: the kubelet requests its client certificate through a CSR
	// (TLS bootstrap). Otherwise it holds a client certificate of
	// system:node:<nodeName> in system:nodes.
	KubeletKubeconfig(ctx context.Context, pool, nodeName string) (kubeconfig []byte, bootstrap bool, err error)
	// ProxyKubeconfig returns the kubeconfig of the nodes' kube-proxy
	// (user system:kube-proxy, bound to system:node-proxier), or nil when
	// each node asks for its kube-proxy's certificate itself, with its
	// kubelet's credential once that joined (bootstrap.ProxyCertificate):
	// the way of nodes that join by TLS bootstrap.
	ProxyKubeconfig(ctx context.Context) ([]byte, error)
}

// NodeSpec is what a Machine asks a provider to make.
type NodeSpec struct {
	// MachineName names the Machine.
	MachineName string
	// InstanceType is the shape of the node.
	InstanceType *fkev1.InstanceType
	// Version is the Kubernetes version of the node's kubelet (and
	// kube-proxy); empty means the default version. Providers that
	// simulate nodes report it in the Node's status.
	Version string
	// Template is the Node to register (see nodetemplate.Build): its name,
	// labels, taints, capacity and allocatable. Providers that register the
	// Node themselves (kwok) create it from the template; providers whose
	// kubelet registers it apply the labels and taints through the kubelet.
	Template *corev1.Node
}

// Instance is a node a provider made.
type Instance struct {
	// ProviderID is unique per provider, e.g. kwok://<cluster>/<node>.
	ProviderID string
	// NodeName is the Node's name in the tenant cluster.
	NodeName string
	// MachineName is the Machine the instance was made for.
	MachineName string
	// State is where the instance is in its life; providers whose nodes are
	// up as soon as Create returns report InstanceRunning.
	State InstanceState
	// Message says why, when State is InstanceFailed or InstancePending.
	Message string
}

// InstanceState is where an instance is in its life.
type InstanceState string

const (
	// InstancePending: the instance is being made (processes start).
	InstancePending InstanceState = "Pending"
	// InstanceRunning: the instance runs (its Node may not be Ready yet).
	InstanceRunning InstanceState = "Running"
	// InstanceFailed: the instance cannot run; Message says why. It stays
	// until it is deleted.
	InstanceFailed InstanceState = "Failed"
)

// Provider makes and removes worker nodes of tenant clusters.
type Provider interface {
	// Name returns the provider's name (fkev1.ProviderName).
	Name() fkev1.ProviderName
	// Create makes a node for spec in cluster. Idempotent: a second call for
	// the same MachineName returns the existing instance. It returns without
	// waiting for the node to be Ready. Errors: *InsufficientCapacityError when
	// the provider cannot make the type now.
	Create(ctx context.Context, cluster Cluster, spec NodeSpec) (Instance, error)
	// Delete removes the instance (and its Node). Idempotent: deleting a gone
	// instance returns a *NotFoundError, which callers treat as success.
	Delete(ctx context.Context, cluster Cluster, providerID string) error
	// Get returns the instance with providerID, or a *NotFoundError. Its
	// State tells a launch that failed after Create returned. Providers that
	// run processes for an instance (local) start them again here when they
	// are not running (after a manager restart).
	Get(ctx context.Context, cluster Cluster, providerID string) (Instance, error)
	// List returns every instance the provider made in cluster.
	List(ctx context.Context, cluster Cluster) ([]Instance, error)
	// InstanceTypes filters the catalog to the types this provider can make.
	InstanceTypes(ctx context.Context, catalog []fkev1.InstanceType) ([]fkev1.InstanceType, error)
	// Release stops whatever the provider runs for cluster (e.g. a kwok
	// process) once the cluster is deleted. Idempotent.
	Release(ctx context.Context, cluster Cluster) error
}

// NotFoundError says an instance does not exist.
type NotFoundError struct{ ProviderID string }

func (e *NotFoundError) Error() string { return fmt.Sprintf("instance %s not found", e.ProviderID) }

// InsufficientCapacityError says the provider cannot make an instance type now.
type InsufficientCapacityError struct {
	InstanceType string
	Reason       string
}

func (e *InsufficientCapacityError) Error() string {
	return fmt.Sprintf("insufficient capacity for instance type %s: %s", e.InstanceType, e.Reason)
}

// IsNotFound reports whether err is or wraps a *NotFoundError.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf)
}

// IsInsufficientCapacity reports whether err is or wraps an *InsufficientCapacityError.
func IsInsufficientCapacity(err error) bool {
	var ic *InsufficientCapacityError
	return errors.As(err, &ic)
}
