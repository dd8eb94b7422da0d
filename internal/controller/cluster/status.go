package cluster

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/versions"
)

// Cluster phases.
const (
	PhaseProvisioning = "Provisioning"
	PhaseReady        = "Ready"
	PhaseFailed       = "Failed"
)

// validate checks what the CRD schema cannot: that this fke can run the spec.
func (r *Reconciler) validate(cl *fkev1.Cluster) (reason, message string, ok bool) {
	if r.runtime(cl) == nil {
		var names []string
		for n := range r.Runtimes {
			names = append(names, string(n))
		}
		slices.Sort(names)
		runs := "no control-plane runtime"
		if len(names) > 0 {
			runs = "runtime " + strings.Join(names, ", ")
		}
		return "UnsupportedRuntime", fmt.Sprintf("runtime %q is not enabled in this fke-manager, which runs %s (fke-manager --runtimes)", cl.Spec.Runtime, runs), false
	}
	if err := versions.CheckRunnable(cl.Spec.Version); err != nil {
		return "UnsupportedVersion", err.Error(), false
	}
	return "", "", true
}

// computeStatus sets phase and conditions from the runtime's view. A ready
// plane being taken over from an earlier fke-manager (st.Adopting) stays
// ready, with the reason Adopting, until the checks say otherwise.
func computeStatus(cl *fkev1.Cluster, st controlplane.Status) {
	gen := cl.Generation
	if st.Ready() {
		cl.Status.Phase = PhaseReady
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{
			Type: fkev1.ConditionControlPlaneReady, Status: metav1.ConditionTrue, Reason: fkev1.ReasonReady,
			Message: "etcd, kube-apiserver, kube-controller-manager and kube-scheduler are ready", ObservedGeneration: gen,
		})
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{
			Type: fkev1.ConditionReady, Status: metav1.ConditionTrue, Reason: fkev1.ReasonReady,
			Message: "cluster is ready", ObservedGeneration: gen,
		})
		return
	}
	if st.Adopting() && meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionControlPlaneReady) {
		// Its processes ran on while no fke-manager did; this one took
		// them over and has not checked them again yet. Nothing stopped:
		// the plane is not "not ready".
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{
			Type: fkev1.ConditionControlPlaneReady, Status: metav1.ConditionTrue, Reason: fkev1.ReasonAdopting,
			Message:            "etcd, kube-apiserver, kube-controller-manager and kube-scheduler ran on through a restart of fke-manager, which is taking them over",
			ObservedGeneration: gen,
		})
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{
			Type: fkev1.ConditionReady, Status: metav1.ConditionTrue, Reason: fkev1.ReasonAdopting,
			Message: "cluster is ready; a restarted fke-manager is taking its control plane over", ObservedGeneration: gen,
		})
		return
	}
	msg := "waiting for " + strings.Join(st.NotReady(), ", ")
	if cl.Status.Phase != PhaseReady {
		cl.Status.Phase = PhaseProvisioning
	}
	reason := fkev1.ReasonStarting
	if st.Queued != "" {
		reason, msg = fkev1.ReasonQueued, st.Queued
	}
	if meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionControlPlaneReady) || cl.Status.Phase == PhaseReady {
		reason = fkev1.ReasonComponentsNotReady
		cl.Status.Phase = PhaseProvisioning
	}
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{
		Type: fkev1.ConditionControlPlaneReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: gen,
	})
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{
		Type: fkev1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: gen,
	})
}

// setNotReady records a spec the controller cannot run.
func setNotReady(cl *fkev1.Cluster, reason, msg string) {
	cl.Status.Phase = PhaseFailed
	for _, t := range []string{fkev1.ConditionControlPlaneReady, fkev1.ConditionReady} {
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{
			Type: t, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: cl.Generation,
		})
	}
}

// setUnknown records an internal error: the state is not known.
func setUnknown(cl *fkev1.Cluster, err error) {
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{
		Type: fkev1.ConditionReady, Status: metav1.ConditionUnknown, Reason: fkev1.ReasonInternalError,
		Message: err.Error(), ObservedGeneration: cl.Generation,
	})
}

func equalStatus(a, b fkev1.ClusterStatus) bool {
	return reflect.DeepEqual(a, b)
}
