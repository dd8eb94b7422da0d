package cluster

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
)

// TestRuntimeOfCluster: a Cluster is run by the runtime its spec names
// (local when it names none); one this manager does not run is refused
// with the runtimes it does run.
func TestRuntimeOfCluster(t *testing.T) {
	local, hosted := &poolRuntime{}, &standbyRuntime{}
	for _, tc := range []struct {
		name     string
		runtimes map[fkev1.ControlPlaneRuntime]controlplane.Runtime
		spec     fkev1.ControlPlaneRuntime
		want     controlplane.Runtime
		msg      string
	}{
		{name: "unset is local", runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: local}, spec: "", want: local},
		{name: "local", runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: local, fkev1.RuntimeHosted: hosted}, spec: fkev1.RuntimeLocal, want: local},
		{name: "hosted", runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: local, fkev1.RuntimeHosted: hosted}, spec: fkev1.RuntimeHosted, want: hosted},
		{name: "hosted not run here", runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: local}, spec: fkev1.RuntimeHosted,
			msg: `runtime "hosted" is not enabled in this fke-manager, which runs runtime local (fke-manager --runtimes)`},
		{name: "local not run here", runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeHosted: hosted}, spec: fkev1.RuntimeLocal,
			msg: `runtime "local" is not enabled in this fke-manager, which runs runtime hosted`},
		{name: "no runtime", runtimes: nil, spec: fkev1.RuntimeHosted, msg: "which runs no control-plane runtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{Runtimes: tc.runtimes}
			cl := &fkev1.Cluster{Spec: fkev1.ClusterSpec{Runtime: tc.spec, Version: "v1.37.2"}}
			reason, msg, ok := r.validate(cl)
			if tc.msg != "" {
				if ok || reason != "UnsupportedRuntime" || !strings.Contains(msg, tc.msg) {
					t.Errorf("validate = %q, %q, %v; want UnsupportedRuntime %q", reason, msg, ok, tc.msg)
				}
				return
			}
			if got := r.runtime(cl); !ok || got != tc.want {
				t.Errorf("validate ok %v (%s), runtime %p; want %p", ok, msg, got, tc.want)
			}
		})
	}
}

// TestHostedClusterGetsNoPorts: ports on loopback are the local runtime's
// addressing; a hosted cluster's runtime owns its own, and its addons
// listen on fixed ports in their pods.
func TestHostedClusterGetsNoPorts(t *testing.T) {
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "h"}, Spec: fkev1.ClusterSpec{Runtime: fkev1.RuntimeHosted}}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cl).WithStatusSubresource(cl).Build()
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10), Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{
		fkev1.RuntimeLocal: &poolRuntime{}, fkev1.RuntimeHosted: &standbyRuntime{},
	}}
	if err := r.ensurePorts(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
	want := fkev1.ClusterPorts{MetricsServer: podMetricsServerPort, GPUMetrics: podGPUMetricsPort, VPAWebhook: podVPAWebhookPort}
	if cl.Status.Ports != want {
		t.Errorf("a hosted cluster got ports %+v, want only the addons' %+v", cl.Status.Ports, want)
	}
}

// addressRuntime records the specs Addresses is asked for.
type addressRuntime struct {
	controlplane.Runtime
	specs []controlplane.Spec
}

func (f *addressRuntime) Addresses(_ context.Context, spec controlplane.Spec) (controlplane.Addresses, error) {
	f.specs = append(f.specs, spec)
	return controlplane.Addresses{APIServerDNSNames: []string{"kube-apiserver"}}, nil
}

// TestAddressesKnowTheDatastore: the hosted runtime makes the tenant's
// namespace, marked with its datastore, when asked for its addresses; a
// spec without the datastore marked a shared-etcd cluster dedicated, and
// its control plane then refused to start ("cannot move to shared").
func TestAddressesKnowTheDatastore(t *testing.T) {
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "h"},
		Spec: fkev1.ClusterSpec{Runtime: fkev1.RuntimeHosted, Datastore: fkev1.DatastoreShared, Network: fkev1.ClusterNetwork{ServiceCIDR: "10.96.0.0/16"}}}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cl).Build()
	rt := &addressRuntime{}
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10), Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeHosted: rt}}
	if _, err := r.ensurePKI(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
	if len(rt.specs) == 0 || rt.specs[0].Datastore != string(fkev1.DatastoreShared) || rt.specs[0].Key != "default/h" {
		t.Fatalf("Addresses asked with %+v, want key default/h and datastore shared", rt.specs)
	}
}
