package kwok

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"fke.dev/fke/internal/nodeprovider"
)

func lease(name string, holder *string, renew time.Time) *coordinationv1.Lease {
	d := int32(nodeLeaseDurationSeconds)
	rt := metav1.NewMicroTime(renew)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: holder, LeaseDurationSeconds: &d, RenewTime: &rt},
	}
}

func TestStaleLeases(t *testing.T) {
	dead := "host_0b7c"
	now := time.Now()
	leases := []coordinationv1.Lease{*lease("a", &dead, now), *lease("b", nil, now), *lease("real", &dead, now)}
	got := staleLeases(leases, map[string]bool{"a": true, "b": true, "gone": true})
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Errorf("staleLeases = %v, want the leases of a and b", got)
	}
	if got := staleLeases(leases, nil); len(got) != 0 {
		t.Errorf("staleLeases without nodes = %v", got)
	}
}

// TestDeleteLeases: the Leases of the provider's nodes go, whoever holds
// them; the Lease of a node the provider did not make (a real kubelet's, or
// another cluster's) stays.
func TestDeleteLeases(t *testing.T) {
	cluster := nodeprovider.Cluster{Key: "default/demo", Name: "demo"}
	dead, kubelet := "host_dead", "real-node"
	now := time.Now()
	ours0 := nodeFor(cluster, nodeprovider.NodeSpec{MachineName: "gpu-0", Template: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "demo-gpu-0"}}})
	ours1 := nodeFor(cluster, nodeprovider.NodeSpec{MachineName: "gpu-1", Template: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "demo-gpu-1"}}})
	other := nodeFor(nodeprovider.Cluster{Key: "default/b", Name: "b"}, nodeprovider.NodeSpec{MachineName: "gpu-2", Template: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b-gpu-2"}}})
	realNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real"}}
	client := fake.NewClientset(ours0, ours1, other, realNode,
		lease("demo-gpu-0", &dead, now), lease("demo-gpu-1", nil, now), lease("b-gpu-2", &dead, now), lease("real", &kubelet, now))

	n, err := deleteLeases(context.Background(), client, cluster)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("deleted %d leases, want 2", n)
	}
	leases := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	for _, name := range []string{"demo-gpu-0", "demo-gpu-1"} {
		if _, err := leases.Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("lease %s: %v, want it deleted", name, err)
		}
	}
	for _, name := range []string{"real", "b-gpu-2"} {
		if _, err := leases.Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("lease %s of a node the provider did not make: %v", name, err)
		}
	}
	if n, err := deleteLeases(context.Background(), client, cluster); err != nil || n != 0 {
		t.Errorf("second run: deleted %d, err %v; want nothing to do", n, err)
	}
	if n, err := deleteLeases(context.Background(), fake.NewClientset(), cluster); err != nil || n != 0 {
		t.Errorf("no nodes: deleted %d, err %v", n, err)
	}
}
