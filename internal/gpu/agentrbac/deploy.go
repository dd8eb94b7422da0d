// Package agentrbac holds the Kubernetes manifests the GPU agent needs in a
// tenant cluster: RBAC and the ValidatingAdmissionPolicy that limits the
// agent to its own Node.
package agentrbac

import _ "embed"

// RBAC is rbac.yaml: ServiceAccount kube-system/fke-gpu-agent,
// ClusterRole/Binding, and the own-Node ValidatingAdmissionPolicy + binding.
//
//go:embed rbac.yaml
var RBAC []byte
