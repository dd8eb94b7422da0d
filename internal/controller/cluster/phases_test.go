package cluster

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
)

// TestPassEndsAtAPhaseThatSaysSo: a Cluster whose runtime this manager
// does not run ends the pass at the validate phase, with the status and an
// event that say why; the phases after it (ports, PKI, control plane)
// do nothing.
func TestPassEndsAtAPhaseThatSaysSo(t *testing.T) {
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "h"},
		Spec: fkev1.ClusterSpec{Runtime: fkev1.RuntimeHosted, Version: "v1.37.2"}}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cl).WithStatusSubresource(cl).Build()
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, Recorder: rec, Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: &poolRuntime{}}}
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "h"}})
	if err != nil || res != (ctrl.Result{}) {
		t.Fatalf("Reconcile = %+v, %v; want no requeue and no error (the spec must change first)", res, err)
	}
	got := &fkev1.Cluster{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: "h"}, got); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, fkev1.ConditionReady); cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "UnsupportedRuntime" {
		t.Errorf("Ready condition %+v, want False UnsupportedRuntime", cond)
	}
	if len(rec.Events) != 1 {
		t.Errorf("%d events, want the one saying why", len(rec.Events))
	}
	if got.Status.Ports != (fkev1.ClusterPorts{}) || got.Status.Endpoint != "" {
		t.Errorf("later phases ran: ports %+v, endpoint %q", got.Status.Ports, got.Status.Endpoint)
	}
	secrets := &corev1.SecretList{}
	if err := c.List(context.Background(), secrets); err != nil || len(secrets.Items) != 0 {
		t.Errorf("the PKI phase ran: %d Secrets, %v", len(secrets.Items), err)
	}
}

// TestPhasesInOrder: a pass allocates and makes its PKI before it restores
// or starts anything, and starts the control plane before it upgrades it
// or installs addons.
func TestPhasesInOrder(t *testing.T) {
	var names []string
	for _, p := range (&Reconciler{}).phases() {
		names = append(names, p.Name)
	}
	pos := map[string]int{}
	for i, n := range names {
		pos[n] = i
	}
	for _, before := range [][2]string{{"validate", "allocate"}, {"allocate", "pki"}, {"pki", "restore"}, {"restore", "control plane"},
		{"control plane", "upgrade"}, {"upgrade", "addons"}, {"addons", "version"}} {
		if pos[before[0]] >= pos[before[1]] {
			t.Errorf("phase %q runs after %q: %v", before[0], before[1], names)
		}
	}
}
