package nodepool

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// legacyPool is a pool made before per-cluster names, with two machines.
func legacyPool() (*fkev1.NodePool, []*fkev1.Machine) {
	old := &fkev1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gpu", UID: "old-uid", Finalizers: []string{fkev1.NodePoolFinalizer}},
		Spec:       fkev1.NodePoolSpec{ClusterName: "demo", InstanceType: "gpu-h100x8", Replicas: ptr.To[int32](2)},
	}
	ref := *metav1.NewControllerRef(old, fkev1.GroupVersion.WithKind("NodePool"))
	var ms []*fkev1.Machine
	for _, n := range []string{"gpu-a", "gpu-b"} {
		ms = append(ms, &fkev1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: n, Labels: old.MachineSelector(), OwnerReferences: []metav1.OwnerReference{ref}},
			Spec:       fkev1.MachineSpec{ClusterName: "demo", NodePoolName: "gpu", InstanceType: "gpu-h100x8", Provider: fkev1.ProviderKwok, TemplateHash: TemplateHash(old)},
		})
	}
	return old, ms
}

func renameClient(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := fkev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(), funcs)
}

func TestRenameKeepsMachinesAndTemplate(t *testing.T) {
	old, ms := legacyPool()
	c := renameClient(t, interceptor.Funcs{}, old, ms[0], ms[1])
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10)}
	ctx := context.Background()
	if err := r.rename(ctx, old, ms); err != nil {
		t.Fatal(err)
	}
	renamed := &fkev1.NodePool{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo.gpu"}, renamed); err != nil {
		t.Fatalf("renamed pool: %v", err)
	}
	if renamed.Spec.PoolName != "gpu" || renamed.PoolName() != "gpu" || renamed.Legacy() {
		t.Fatalf("renamed pool has poolName %q, want gpu", renamed.Spec.PoolName)
	}
	if TemplateHash(renamed) != TemplateHash(old) {
		t.Fatal("the template hash changed: every node would be replaced")
	}
	if *renamed.Spec.Replicas != 2 || renamed.Annotations[fkev1.AnnotationRenamedFrom] != "gpu" {
		t.Fatalf("renamed pool lost its spec or origin: %+v %v", renamed.Spec, renamed.Annotations)
	}
	for _, m := range ms {
		got := &fkev1.Machine{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
			t.Fatalf("machine %s: %v", m.Name, err)
		}
		owner := metav1.GetControllerOf(got)
		if owner == nil || owner.UID != renamed.UID || len(got.OwnerReferences) != 1 {
			t.Fatalf("machine %s owners %+v, want only the renamed pool", m.Name, got.OwnerReferences)
		}
		if got.NodePoolKey() != renamed.Name {
			t.Fatalf("machine %s maps to pool %s, want %s", m.Name, got.NodePoolKey(), renamed.Name)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), &fkev1.NodePool{}); !apierrors.IsNotFound(err) {
		t.Fatalf("old pool still exists (err %v)", err)
	}
}

// A crash after any step leaves a state the next rename finishes.
func TestRenameResumesAfterAFailure(t *testing.T) {
	old, ms := legacyPool()
	fail := true
	c := renameClient(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*fkev1.Machine); ok && obj.GetName() == "gpu-b" && fail {
				return errors.New("connection refused")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}, old, ms[0], ms[1])
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10)}
	ctx := context.Background()
	if err := r.rename(ctx, old, ms); err == nil {
		t.Fatal("want the hand-over error")
	}
	// The old pool must survive a partial hand-over: deleting it would
	// garbage-collect gpu-b.
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), &fkev1.NodePool{}); err != nil {
		t.Fatalf("old pool removed before every machine was handed over: %v", err)
	}
	fail = false
	fresh := func(name string) *fkev1.Machine {
		m := &fkev1.Machine{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if err := r.rename(ctx, old, []*fkev1.Machine{fresh("gpu-a"), fresh("gpu-b")}); err != nil {
		t.Fatalf("second rename: %v", err)
	}
	renamed := &fkev1.NodePool{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo.gpu"}, renamed); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"gpu-a", "gpu-b"} {
		if o := metav1.GetControllerOf(fresh(n)); o == nil || o.UID != renamed.UID {
			t.Fatalf("machine %s controlled by %+v, want %s", n, o, renamed.UID)
		}
	}
}

// A pool someone made by hand under the new name is never merged with the old one.
func TestRenameRefusesAForeignPool(t *testing.T) {
	old, ms := legacyPool()
	foreign := &fkev1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo.gpu", UID: types.UID("foreign")},
		Spec:       fkev1.NodePoolSpec{ClusterName: "demo", PoolName: "gpu", InstanceType: "cpu-small"},
	}
	c := renameClient(t, interceptor.Funcs{}, old, ms[0], ms[1], foreign)
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, Recorder: rec}
	if err := r.rename(context.Background(), old, ms); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(old), &fkev1.NodePool{}); err != nil {
		t.Fatalf("old pool removed despite the conflict: %v", err)
	}
	m := &fkev1.Machine{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(ms[0]), m); err != nil || metav1.GetControllerOf(m).UID != old.UID {
		t.Fatalf("machine handed to a foreign pool: %+v %v", m.OwnerReferences, err)
	}
	select {
	case ev := <-rec.Events:
		if want := "RenameConflict"; !strings.Contains(ev, want) {
			t.Fatalf("event %q, want %s", ev, want)
		}
	default:
		t.Fatal("no event explains the conflict")
	}
}
