package machine

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodetemplate"
	"fke.dev/fke/internal/nodeutil"
)

// Cond is a condition's status, reason and message.
type Cond struct {
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

// NodeState is what a Node says about its Machine.
type NodeState struct {
	Registered     Cond
	GPUReady       Cond
	GPUAllocatable int64
}

// Ready reports whether the node is registered, Ready and has its GPUs.
func (s NodeState) Ready() bool {
	return s.Registered.Status == metav1.ConditionTrue && s.GPUReady.Status == metav1.ConditionTrue
}

// Observe computes Registered and GPUReady from a Node (pure). wantGPUs is
// the instance type's GPU count; a node is GPUReady only when its
// allocatable nvidia.com/gpu reaches it, so a Ready node whose device plugin
// has not registered yet still counts as coming up (no duplicate scale-up).
func Observe(node *corev1.Node, missing bool, wantGPUs int64) NodeState {
	var st NodeState
	switch {
	case missing:
		st.Registered = Cond{metav1.ConditionFalse, fkev1.ReasonNodeNotFound, "waiting for the node to register"}
	case !nodeutil.NodeReady(node):
		st.Registered = Cond{metav1.ConditionFalse, fkev1.ReasonNodeNotReady, fmt.Sprintf("node %s is not Ready", node.Name)}
	default:
		st.Registered = Cond{metav1.ConditionTrue, fkev1.ReasonReady, fmt.Sprintf("node %s is Ready", node.Name)}
	}
	if !missing {
		if q, ok := node.Status.Allocatable[nodetemplate.ResourceGPU]; ok {
			st.GPUAllocatable = q.Value()
		}
	}
	switch {
	case wantGPUs == 0:
		st.GPUReady = Cond{metav1.ConditionTrue, fkev1.ReasonNoGPUs, "instance type has no GPUs"}
	case missing:
		st.GPUReady = Cond{metav1.ConditionFalse, fkev1.ReasonNodeNotFound, "waiting for the node to register"}
	case monitorFailed(node):
		st.GPUReady = Cond{metav1.ConditionFalse, fkev1.ReasonGPUHealthMonitorFailed, "the node's GPU health monitor cannot run: " + monitorMessage(node)}
	case st.GPUAllocatable < wantGPUs:
		st.GPUReady = Cond{metav1.ConditionFalse, fkev1.ReasonGPUsNotAllocatable, fmt.Sprintf("%d of %d GPUs allocatable", st.GPUAllocatable, wantGPUs)}
	default:
		st.GPUReady = Cond{metav1.ConditionTrue, fkev1.ReasonReady, fmt.Sprintf("%d GPUs allocatable", st.GPUAllocatable)}
	}
	return st
}

// monitorFailed reports whether node's GPU agent says its health monitor
// cannot run (condition GPUHealthMonitorFailed True): its GPUs are not
// watched, so they do not count as ready.
func monitorFailed(node *corev1.Node) bool {
	return node != nil && monitorMessage(node) != ""
}

func monitorMessage(node *corev1.Node) string {
	for _, c := range node.Status.Conditions {
		if string(c.Type) == fkev1.NodeConditionGPUHealthMonitorFailed && c.Status == corev1.ConditionTrue {
			if c.Message == "" {
				return c.Reason
			}
			return c.Message
		}
	}
	return ""
}
