package autoscaler

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// patchServer is a fake management API for pool patches: each patch says
// so on entered and waits for a value on gate (when set), fails with fail (when set), and bumps the
// pool's generation as the API server does for a spec change.
type patchServer struct {
	client.Client
	entered chan struct{}
	gate    chan struct{}
	fail    error
	patched []int32
	gen     int64
}

func newPatchServer(t *testing.T, np *fkev1.NodePool) *patchServer {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := fkev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s := &patchServer{gen: np.Generation}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(np.DeepCopy()).Build()
	s.Client = interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if s.gate != nil {
				s.entered <- struct{}{}
				<-s.gate
			}
			if s.fail != nil {
				return s.fail
			}
			if err := c.Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			s.gen++
			p := obj.(*fkev1.NodePool)
			p.Generation = s.gen
			s.patched = append(s.patched, ptr.Deref(p.Spec.Replicas, -1))
			return nil
		},
	})
	return s
}

func testPool(replicas int32, generation int64) *fkev1.NodePool {
	return &fkev1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gpu", Generation: generation},
		Spec:       fkev1.NodePoolSpec{ClusterName: "c1", Replicas: ptr.To(replicas)},
	}
}

// outcome is what a resizeDone was told.
type outcome struct {
	replicas int32
	err      error
}

func recordTo(out *[]outcome) resizeDone {
	return func(_ context.Context, np *fkev1.NodePool, _ time.Time, err error) {
		o := outcome{err: err, replicas: -1}
		if np != nil {
			o.replicas = ptr.Deref(np.Spec.Replicas, -1)
		}
		*out = append(*out, o)
	}
}

func TestResizerMergesSizesAskedWhileWriting(t *testing.T) {
	cached := testPool(2, 1)
	srv := newPatchServer(t, cached)
	srv.entered, srv.gate = make(chan struct{}), make(chan struct{})
	z := newResizer(srv, clocktesting.NewFakePassiveClock(time.Now()))
	ctx := context.Background()
	var told []outcome

	z.Resize(cached, 3, recordTo(&told))
	wrote := make(chan bool)
	go func() { wrote <- z.writeNext(ctx) }()
	<-srv.entered // the patch to 3 is in flight; meanwhile two more passes decide
	if got := z.Desired(cached); got != 3 {
		t.Fatalf("while the patch to 3 is in flight Desired = %d, want 3", got)
	}
	z.Resize(cached, 5, recordTo(&told))
	z.Resize(cached, 7, recordTo(&told))
	if got := z.Desired(cached); got != 7 {
		t.Fatalf("with 7 asked Desired = %d, want 7", got)
	}
	srv.gate <- struct{}{}
	<-wrote
	go func() { wrote <- z.writeNext(ctx) }()
	<-srv.entered
	srv.gate <- struct{}{}
	<-wrote
	if more := z.writeNext(ctx); more {
		t.Fatal("a third patch was written")
	}

	if len(srv.patched) != 2 || srv.patched[0] != 3 || srv.patched[1] != 7 {
		t.Fatalf("patches wrote %v, want [3 7] (5 merged into 7)", srv.patched)
	}
	want := []outcome{{3, nil}, {7, nil}, {7, nil}}
	if len(told) != len(want) {
		t.Fatalf("callers told %v, want %v", told, want)
	}
	for i := range want {
		if told[i] != want[i] {
			t.Fatalf("callers told %v, want %v", told, want)
		}
	}

	// The cache has not seen the second patch (generation 3) yet: the size
	// asked still holds; once it has, the cache's own size does.
	if got := z.Desired(testPool(3, 2)); got != 7 {
		t.Fatalf("cache at generation 2: Desired = %d, want 7", got)
	}
	if got := z.Desired(testPool(7, 3)); got != 7 {
		t.Fatalf("cache at generation 3: Desired = %d, want 7", got)
	}
	if got := z.Desired(testPool(4, 4)); got != 4 {
		t.Fatalf("a later change (generation 4, 4 replicas): Desired = %d, want 4", got)
	}
}

func TestResizerForgetsFailedSize(t *testing.T) {
	cached := testPool(2, 1)
	srv := newPatchServer(t, cached)
	srv.fail = errors.New("the server is unavailable")
	z := newResizer(srv, clocktesting.NewFakePassiveClock(time.Now()))
	var told []outcome

	z.Resize(cached, 4, recordTo(&told))
	if !z.writeNext(context.Background()) {
		t.Fatal("nothing written")
	}
	if len(told) != 1 || told[0].err == nil || told[0].replicas != -1 {
		t.Fatalf("caller told %v, want the error and no pool", told)
	}
	if got := z.Desired(cached); got != 2 {
		t.Fatalf("after the failed patch Desired = %d, want the cache's 2", got)
	}
}

func TestResizerWritesPoolsInOrderAsked(t *testing.T) {
	a, b := testPool(0, 1), testPool(0, 1)
	b.Name = "cpu"
	scheme := runtime.NewScheme()
	if err := fkev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var order []string
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(a.DeepCopy(), b.DeepCopy()).Build(), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			order = append(order, obj.GetName())
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	z := newResizer(c, clocktesting.NewFakePassiveClock(time.Now()))
	z.Resize(b, 1, nil)
	z.Resize(a, 1, nil)
	z.Resize(b, 2, nil) // merged into b's queued size: b stays first
	for z.writeNext(context.Background()) {
	}
	if len(order) != 2 || order[0] != "cpu" || order[1] != "gpu" {
		t.Fatalf("patched %v, want [cpu gpu]", order)
	}
	got := &fkev1.NodePool{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(b), got); err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(got.Spec.Replicas, -1) != 2 {
		t.Fatalf("pool cpu has %d replicas, want 2", ptr.Deref(got.Spec.Replicas, -1))
	}
}
