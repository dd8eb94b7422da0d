package v1alpha1

// The Secrets the cluster controller keeps for each Cluster, in its
// namespace, named after it.

// KubeconfigKey is the key of the admin kubeconfig in a Cluster's
// kubeconfig Secret (the Cluster API convention).
const KubeconfigKey = "value"

// KubeconfigSecretName names the Secret that holds a cluster's admin kubeconfig.
func KubeconfigSecretName(cluster string) string { return cluster + "-kubeconfig" }

// PKISecretName names the Secret that holds a cluster's certificates and keys.
func PKISecretName(cluster string) string { return cluster + "-pki" }
