package index

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// TestOfCluster: the index finds a cluster's pools (by spec.clusterName,
// labelled or not) and machines (by label), and nothing of a cluster of
// the same name in another namespace or of another cluster beside it.
func TestOfCluster(t *testing.T) {
	s := runtime.NewScheme()
	if err := fkev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	pool := func(ns, name, cluster string) *fkev1.NodePool {
		return &fkev1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: fkev1.NodePoolSpec{ClusterName: cluster}}
	}
	machine := func(ns, name, cluster string) *fkev1.Machine {
		return &fkev1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{fkev1.LabelCluster: cluster}}}
	}
	c := fake.NewClientBuilder().WithScheme(s).
		WithIndex(&fkev1.NodePool{}, Cluster, NodePoolCluster).WithIndex(&fkev1.Machine{}, Cluster, MachineCluster).
		WithObjects(pool("team", "a.gpu", "a"), pool("team", "a.cpu", "a"), pool("team", "b.gpu", "b"), pool("other", "a.gpu", "a"),
			machine("team", "a-gpu-1", "a"), machine("team", "b-gpu-1", "b"), machine("other", "a-gpu-1", "a"),
			&fkev1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "unlabelled"}}).
		Build()
	names := func(list client.ObjectList) []string {
		var out []string
		switch l := list.(type) {
		case *fkev1.NodePoolList:
			for _, o := range l.Items {
				out = append(out, o.Name)
			}
		case *fkev1.MachineList:
			for _, o := range l.Items {
				out = append(out, o.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	var pools fkev1.NodePoolList
	if err := c.List(context.Background(), &pools, OfCluster("team", "a")...); err != nil {
		t.Fatal(err)
	}
	if got, want := names(&pools), []string{"a.cpu", "a.gpu"}; !slices.Equal(got, want) {
		t.Errorf("pools of team/a: %v, want %v", got, want)
	}
	var machines fkev1.MachineList
	if err := c.List(context.Background(), &machines, OfCluster("team", "a")...); err != nil {
		t.Fatal(err)
	}
	if got, want := names(&machines), []string{"a-gpu-1"}; !slices.Equal(got, want) {
		t.Errorf("machines of team/a: %v, want %v", got, want)
	}
}
