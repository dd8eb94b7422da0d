package cluster

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

func TestEnsurePodCIDRPicksFreeRangesOnce(t *testing.T) {
	ctx := context.Background()
	scheme := testScheme(t)
	old := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "old"},
		Spec: fkev1.ClusterSpec{Network: fkev1.ClusterNetwork{PodCIDR: "10.112.0.0/12", ServiceCIDR: "10.96.0.0/16"}}}
	a := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}, Spec: fkev1.ClusterSpec{Network: fkev1.ClusterNetwork{ServiceCIDR: "10.96.0.0/16"}}}
	b := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "b"}, Spec: fkev1.ClusterSpec{Network: fkev1.ClusterNetwork{ServiceCIDR: "10.128.0.0/16"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(old, a, b).Build()
	r := &Reconciler{
		Client: c, Recorder: events.NewFakeRecorder(10),
		HostRoutes: func() ([]netip.Prefix, error) { return []netip.Prefix{netip.MustParsePrefix("10.132.0.0/24")}, nil },
	}
	if err := r.ensurePodCIDR(ctx, a); err != nil {
		t.Fatal(err)
	}
	// Skipped: the old cluster's /12, b's service range (10.128/14) and the
	// host route (10.132/14).
	if a.Spec.Network.PodCIDR != "10.136.0.0/14" {
		t.Fatalf("a got %s, want 10.136.0.0/14", a.Spec.Network.PodCIDR)
	}
	if err := r.ensurePodCIDR(ctx, b); err != nil {
		t.Fatal(err)
	}
	if b.Spec.Network.PodCIDR != "10.140.0.0/14" {
		t.Fatalf("b got %s, want 10.140.0.0/14 (after a's)", b.Spec.Network.PodCIDR)
	}
	stored := &fkev1.Cluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(a), stored); err != nil || stored.Spec.Network.PodCIDR != "10.136.0.0/14" {
		t.Fatalf("pick not recorded: %v %+v", err, stored.Spec.Network)
	}
	// A cluster that has a range keeps it.
	if err := r.ensurePodCIDR(ctx, old); err != nil || old.Spec.Network.PodCIDR != "10.112.0.0/12" {
		t.Fatalf("old cluster: %v, %s", err, old.Spec.Network.PodCIDR)
	}
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := fkev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEnsurePortsAddsNewPorts: a cluster made before metrics-server had a
// port gets one, and its other ports stay.
func TestEnsurePortsAddsNewPorts(t *testing.T) {
	ctx := context.Background()
	old := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "old"},
		Status: fkev1.ClusterStatus{Ports: fkev1.ClusterPorts{APIServer: 1, EtcdClient: 2, EtcdPeer: 3, ControllerManager: 4, Scheduler: 5}}}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(old).WithStatusSubresource(old).Build()
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10)}
	if err := r.ensurePorts(ctx, old); err != nil {
		t.Fatal(err)
	}
	p := old.Status.Ports
	if p.APIServer != 1 || p.EtcdClient != 2 || p.EtcdPeer != 3 || p.ControllerManager != 4 || p.Scheduler != 5 {
		t.Errorf("existing ports changed: %+v", p)
	}
	if p.MetricsServer <= 5 {
		t.Errorf("metrics-server port %d, want a free port", p.MetricsServer)
	}
	stored := &fkev1.Cluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Status.Ports != p {
		t.Errorf("stored ports %+v, want %+v", stored.Status.Ports, p)
	}
	// Once all are set, nothing changes.
	if err := r.ensurePorts(ctx, old); err != nil || old.Status.Ports != p {
		t.Errorf("second ensurePorts: %v, ports %+v", err, old.Status.Ports)
	}
}
