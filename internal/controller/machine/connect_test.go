package machine

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/index"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/tenant"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := fkev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func machineOf(ns, name, cluster string) *fkev1.Machine {
	return &fkev1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{fkev1.LabelCluster: cluster}},
		Spec:       fkev1.MachineSpec{ClusterName: cluster, NodePoolName: "gpu", InstanceType: "gpu-h100x8", Provider: fkev1.ProviderKwok},
	}
}

// TestClusterConnectedWakesTheClustersMachines: when the registry connects
// to a tenant, every machine of that cluster, and only those, is reconciled.
func TestClusterConnectedWakesTheClustersMachines(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithIndex(&fkev1.Machine{}, index.Cluster, index.MachineCluster).WithObjects(
		machineOf("team", "a-1", "a"), machineOf("team", "a-2", "a"),
		machineOf("team", "b-1", "b"), machineOf("other", "a-9", "a"),
	).Build()
	r := &Reconciler{Client: c, NodeEvents: make(chan event.GenericEvent, 10)}
	r.ClusterConnected("team/a")
	close(r.NodeEvents)
	var got []string
	for ev := range r.NodeEvents {
		got = append(got, ev.Object.GetNamespace()+"/"+ev.Object.GetName())
	}
	sort.Strings(got)
	if want := []string{"team/a-1", "team/a-2"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("reconciled %v, want %v", got, want)
	}
}

// TestUnreachableTenantRetriesWithoutBackoff: a machine whose cluster's API
// server does not serve (a manager restart starts it again) is retried at a
// steady pace, not with the growing backoff of an error, and says why.
func TestUnreachableTenantRetriesWithoutBackoff(t *testing.T) {
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "a"}}
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: fkev1.ConditionReady, Status: metav1.ConditionTrue, Reason: fkev1.ReasonReady})
	it := &fkev1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100x8"}}
	m := machineOf("team", "a-1", "a")
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cl, it, m).WithStatusSubresource(cl, m).Build()
	unreachable := func(context.Context, string) ([]byte, error) { return nil, errors.New("connection refused") }
	r := &Reconciler{
		Client:    c,
		Tenants:   tenant.NewRegistry(testScheme(t), unreachable, slog.New(slog.DiscardHandler)),
		Providers: map[fkev1.ProviderName]nodeprovider.Provider{fkev1.ProviderKwok: nil},
	}
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m)})
	if err != nil {
		t.Fatalf("Reconcile returned %v: an error backs off exponentially", err)
	}
	if res.RequeueAfter != requeueNotReady {
		t.Fatalf("requeue after %v, want %v", res.RequeueAfter, requeueNotReady)
	}
	got := &fkev1.Machine{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, fkev1.ConditionReady)
	if ready == nil || ready.Reason != fkev1.ReasonClusterNotReady {
		t.Fatalf("Ready condition %+v, want reason %s", ready, fkev1.ReasonClusterNotReady)
	}
}
