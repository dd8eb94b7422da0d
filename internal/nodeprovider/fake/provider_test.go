package fake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeprovider"
)

var demo = nodeprovider.Cluster{Key: "default/demo", Name: "demo"}

func spec(machine, instanceType string) nodeprovider.NodeSpec {
	return nodeprovider.NodeSpec{
		MachineName:  machine,
		InstanceType: &fkev1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: instanceType}},
		Template:     &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + machine}},
	}
}

func TestCreateRecordsAndIsIdempotent(t *testing.T) {
	ctx := context.Background()
	p := New()
	first, err := p.Create(ctx, demo, spec("m1", "gpu-h100x8"))
	if err != nil {
		t.Fatal(err)
	}
	want := nodeprovider.Instance{ProviderID: "fake://demo/node-m1", NodeName: "node-m1", MachineName: "m1", State: nodeprovider.InstanceRunning}
	if first != want {
		t.Fatalf("Create = %+v, want %+v", first, want)
	}
	again, err := p.Create(ctx, demo, spec("m1", "gpu-h100x8"))
	if err != nil || again != first {
		t.Fatalf("second Create = %+v, %v; want %+v", again, err, first)
	}
	calls := p.CallsTo(MethodCreate)
	if len(calls) != 2 || calls[0].MachineName != "m1" || calls[0].InstanceType != "gpu-h100x8" || calls[0].ClusterKey != "default/demo" {
		t.Fatalf("Create calls = %+v", calls)
	}
	if got := p.Instances(demo.Key); len(got) != 1 {
		t.Fatalf("Instances = %+v, want one", got)
	}
	if p.Name() != fkev1.ProviderKwok || NewNamed(fkev1.ProviderLocal).Name() != fkev1.ProviderLocal {
		t.Error("wrong provider names")
	}
}

func TestInjectedErrors(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	tests := []struct {
		name   string
		inject func(p *Provider)
		call   func(p *Provider) error
		check  func(err error) bool
		after  func(p *Provider) error // a second call, expected to succeed
	}{
		{
			name:   "insufficient capacity per instance type",
			inject: func(p *Provider) { p.SetInsufficientCapacity("gpu-h100x8", "no H100 left") },
			call:   func(p *Provider) error { _, err := p.Create(ctx, demo, spec("m1", "gpu-h100x8")); return err },
			check:  nodeprovider.IsInsufficientCapacity,
			after:  func(p *Provider) error { _, err := p.Create(ctx, demo, spec("m2", "gpu-a100x8")); return err },
		},
		{
			name:   "sticky error until cleared",
			inject: func(p *Provider) { p.SetError(MethodList, boom) },
			call:   func(p *Provider) error { _, err := p.List(ctx, demo); return err },
			check:  func(err error) bool { return errors.Is(err, boom) },
			after: func(p *Provider) error {
				if _, err := p.List(ctx, demo); !errors.Is(err, boom) {
					return fmt.Errorf("second List: %v, want boom", err)
				}
				p.SetError(MethodList, nil)
				_, err := p.List(ctx, demo)
				return err
			},
		},
		{
			name:   "one-shot error",
			inject: func(p *Provider) { p.FailNext(MethodCreate, boom) },
			call:   func(p *Provider) error { _, err := p.Create(ctx, demo, spec("m1", "cpu")); return err },
			check:  func(err error) bool { return errors.Is(err, boom) },
			after:  func(p *Provider) error { _, err := p.Create(ctx, demo, spec("m1", "cpu")); return err },
		},
		{
			name:   "release error",
			inject: func(p *Provider) { p.FailNext(MethodRelease, boom) },
			call:   func(p *Provider) error { return p.Release(ctx, demo) },
			check:  func(err error) bool { return errors.Is(err, boom) },
			after: func(p *Provider) error {
				if err := p.Release(ctx, demo); err != nil {
					return err
				}
				if p.Released(demo.Key) != 1 {
					return fmt.Errorf("Released = %d, want 1", p.Released(demo.Key))
				}
				return nil
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			tt.inject(p)
			err := tt.call(p)
			if !tt.check(err) {
				t.Fatalf("error = %v, not the injected one", err)
			}
			calls := p.Calls()
			if len(calls) != 1 || calls[0].Err == nil {
				t.Fatalf("calls = %+v, want one with its error", calls)
			}
			if err := tt.after(p); err != nil {
				t.Fatalf("after: %v", err)
			}
		})
	}
}

func TestGetDeleteNotFound(t *testing.T) {
	ctx := context.Background()
	p := New()
	in, err := p.Create(ctx, demo, spec("m1", "cpu"))
	if err != nil {
		t.Fatal(err)
	}
	other := nodeprovider.Cluster{Key: "default/other", Name: "other"}
	if _, err := p.Get(ctx, other, in.ProviderID); !nodeprovider.IsNotFound(err) {
		t.Errorf("Get in another cluster: %v, want NotFound", err)
	}
	if err := p.Delete(ctx, demo, in.ProviderID); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, demo, in.ProviderID); !nodeprovider.IsNotFound(err) {
		t.Errorf("second Delete: %v, want NotFound", err)
	}
	calls := p.CallsTo(MethodDelete)
	if len(calls) != 2 || calls[0].ProviderID != in.ProviderID {
		t.Errorf("Delete calls = %+v", calls)
	}
	p.ResetCalls()
	if len(p.Calls()) != 0 {
		t.Error("ResetCalls kept calls")
	}
}

func TestInstanceTypes(t *testing.T) {
	p := New()
	p.SetUnsupported("gpu-b200x8")
	catalog := []fkev1.InstanceType{
		{ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100x8"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "gpu-b200x8"}},
	}
	got, err := p.InstanceTypes(context.Background(), catalog)
	if err != nil || len(got) != 1 || got[0].Name != "gpu-h100x8" {
		t.Fatalf("InstanceTypes = %v, %v", got, err)
	}
}

func TestConcurrentCreate(t *testing.T) {
	ctx := context.Background()
	p := New()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			// Two callers per machine: one instance each.
			if _, err := p.Create(ctx, demo, spec(fmt.Sprintf("m%d", i/2), "cpu")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := len(p.Instances(demo.Key)); got != 25 {
		t.Fatalf("instances = %d, want 25", got)
	}
	if got := len(p.CallsTo(MethodCreate)); got != 50 {
		t.Fatalf("Create calls = %d, want 50", got)
	}
}
