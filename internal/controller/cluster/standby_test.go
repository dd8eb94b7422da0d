package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/versions"
)

// standbyRuntime reports every standby plane ready and records adoptions;
// adopting a plane twice is the error the test looks for.
type standbyRuntime struct {
	controlplane.Runtime
	mu      sync.Mutex
	adopted map[string]string // from -> to
	twice   []string
}

func (f *standbyRuntime) Status(context.Context, string) (controlplane.Status, error) {
	st := controlplane.Status{}
	for _, c := range controlplane.Components {
		st.Components = append(st.Components, controlplane.ComponentStatus{Name: c, Running: true, Ready: true})
	}
	return st, nil
}

func (f *standbyRuntime) Adopt(_ context.Context, from, to string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if prev, ok := f.adopted[from]; ok && prev != to {
		f.twice = append(f.twice, fmt.Sprintf("%s by %s and %s", from, prev, to))
	}
	f.adopted[from] = to
	return nil
}

// TestStandbyClaims: two managers (as during a leader handover) claim
// standby planes for twelve new clusters at once. No plane goes to two
// clusters; each cluster that got one holds that plane's CA and ports;
// the others are left to start cold.
func TestStandbyClaims(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := fkev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&fkev1.Cluster{}).Build()
	ctx := context.Background()
	const planes, clusters = 4, 12
	cas := map[string][]byte{}
	for i := range planes {
		id := fmt.Sprintf("p%d", i)
		b, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{ClusterName: "fke-" + id})
		if err != nil {
			t.Fatal(err)
		}
		cas[id] = b[pki.CACertFile]
		ports, _ := json.Marshal(fkev1.ClusterPorts{APIServer: int32(30000 + 10*i), EtcdClient: int32(30001 + 10*i), EtcdPeer: int32(30002 + 10*i), ControllerManager: int32(30003 + 10*i), Scheduler: int32(30004 + 10*i)})
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "fke-system", Name: standbySecret(id), Labels: map[string]string{LabelStandbyPlane: id},
				Annotations: map[string]string{annoVersion: versions.Default, annoServiceCIDR: fkev1.DefaultServiceCIDR, annoPodCIDR: fmt.Sprintf("10.%d.0.0/14", 112+4*i), annoPorts: string(ports)}},
			Data: b,
		}
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	rt := &standbyRuntime{adopted: map[string]string{}}
	managers := []*Reconciler{
		{Client: c, Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: rt}, Recorder: events.NewFakeRecorder(100), Warm: WarmPool{Size: planes, Namespace: "fke-system"}},
		{Client: c, Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: rt}, Recorder: events.NewFakeRecorder(100), Warm: WarmPool{Size: planes, Namespace: "fke-system"}},
	}
	var wg sync.WaitGroup
	errs := make(chan error, clusters)
	for i := range clusters {
		cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("c%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		cl.Spec.Runtime = fkev1.RuntimeLocal
		cl.Spec.Version = versions.Default
		cl.Spec.Network.ServiceCIDR = fkev1.DefaultServiceCIDR
		if err := c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func(r *Reconciler, key client.ObjectKey) {
			defer wg.Done()
			cl := &fkev1.Cluster{}
			if err := c.Get(ctx, key, cl); err != nil {
				errs <- err
				return
			}
			errs <- r.claimStandby(ctx, cl)
		}(managers[i%2], client.ObjectKeyFromObject(cl))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(rt.twice) > 0 {
		t.Fatalf("planes adopted twice: %v", rt.twice)
	}
	if len(rt.adopted) != planes {
		t.Fatalf("%d planes adopted, want all %d (%v)", len(rt.adopted), planes, rt.adopted)
	}
	byCluster := map[string]string{}
	for from, to := range rt.adopted {
		byCluster[to] = from[len(standbyDir)+1:]
	}
	seenCA := map[string]bool{}
	for i := range clusters {
		key := client.ObjectKey{Namespace: "default", Name: fmt.Sprintf("c%d", i)}
		cl := &fkev1.Cluster{}
		if err := c.Get(ctx, key, cl); err != nil {
			t.Fatal(err)
		}
		id, claimed := byCluster[key.String()]
		secret := &corev1.Secret{}
		err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: fkev1.PKISecretName(cl.Name)}, secret)
		if !claimed {
			if err == nil || cl.Status.Ports.APIServer != 0 || cl.Spec.Network.PodCIDR != "" {
				t.Fatalf("%s claimed no plane but has a PKI secret, ports or a pod range: ports %+v, pod range %q", key, cl.Status.Ports, cl.Spec.Network.PodCIDR)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s claimed plane %s but has no PKI secret: %v", key, id, err)
		}
		if !bytes.Equal(secret.Data[pki.CACertFile], cas[id]) {
			t.Fatalf("%s holds a CA other than its plane %s's", key, id)
		}
		if seenCA[string(cas[id])] {
			t.Fatalf("two clusters hold the CA of plane %s", id)
		}
		seenCA[string(cas[id])] = true
		if cl.Status.Ports.APIServer == 0 || cl.Spec.Network.PodCIDR == "" {
			t.Fatalf("%s claimed plane %s but did not take its ports and pod range", key, id)
		}
	}
	var left corev1.SecretList
	if err := c.List(ctx, &left, client.HasLabels{LabelStandbyPlane}); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Fatalf("%d claimed planes still in the pool", len(left.Items))
	}
}

// poolRuntime starts nothing: it records the keys Ensure and Delete see,
// and lists the ensured keys as the data it holds.
type poolRuntime struct {
	controlplane.Runtime
	ensured, deleted []string
}

func (f *poolRuntime) Ensure(_ context.Context, spec controlplane.Spec) (controlplane.Status, error) {
	if !slices.Contains(f.ensured, spec.Key) {
		f.ensured = append(f.ensured, spec.Key)
	}
	return controlplane.Status{}, nil
}
func (f *poolRuntime) Status(context.Context, string) (controlplane.Status, error) {
	return controlplane.Status{}, nil
}
func (f *poolRuntime) Delete(_ context.Context, key string) error {
	f.deleted = append(f.deleted, key)
	f.ensured = slices.DeleteFunc(f.ensured, func(k string) bool { return k == key })
	return nil
}
func (f *poolRuntime) Keys(string) ([]string, error)          { return slices.Clone(f.ensured), nil }
func (f *poolRuntime) ForgetAliases(string) ([]string, error) { return nil, nil }

// TestPoolStepKeepsTheNewPlane: the step that starts a plane does not take
// its fresh data for data no plane describes, and the next step starts no
// second plane while the first is not ready.
func TestPoolStepKeepsTheNewPlane(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = fkev1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&fkev1.Cluster{}).Build()
	rt := &poolRuntime{}
	r := &Reconciler{Client: c, Runtimes: map[fkev1.ControlPlaneRuntime]controlplane.Runtime{fkev1.RuntimeLocal: rt}, Recorder: events.NewFakeRecorder(10), Warm: WarmPool{Size: 1, Namespace: "fke-system"},
		HostRoutes: func() ([]netip.Prefix, error) { return nil, nil }}
	ctx := context.Background()
	for range 2 {
		if _, err := r.poolStep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(rt.deleted) != 0 || len(rt.ensured) != 1 {
		t.Fatalf("after two steps: ensured %v, deleted %v; want one plane, none deleted", rt.ensured, rt.deleted)
	}
	var list corev1.SecretList
	if err := c.List(ctx, &list, client.HasLabels{LabelStandbyPlane}); err != nil || len(list.Items) != 1 {
		t.Fatalf("want one plane Secret, found %d (%v)", len(list.Items), err)
	}
	if got := standbyKey(list.Items[0].Labels[LabelStandbyPlane]); got != rt.ensured[0] {
		t.Fatalf("the Secret names plane %s, the runtime runs %s", got, rt.ensured[0])
	}
}
