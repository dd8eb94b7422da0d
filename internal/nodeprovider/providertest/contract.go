// Package providertest is the contract every nodeprovider.Provider keeps,
// as one test suite that each implementation runs (fake and kwok in their
// packages, local in test/localnode), as Karpenter runs one suite against
// every cloud provider.
package providertest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/nodetemplate"
)

// SetUp returns a fresh provider and two clusters it can make nodes in; it
// registers the cleanup of what the provider made.
type SetUp func(t *testing.T) (p nodeprovider.Provider, a, b nodeprovider.Cluster)

// H100 is the instance type used when a provider makes any shape.
var H100 = &fkev1.InstanceType{
	ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100x8"},
	Spec: fkev1.InstanceTypeSpec{
		CPU:    resource.MustParse("96"),
		Memory: resource.MustParse("1Ti"),
		GPU:    &fkev1.InstanceGPU{Count: 8, Product: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559},
	},
}

// nodeSpec is the spec of machine in cluster, of instance type it.
func nodeSpec(it *fkev1.InstanceType, cluster nodeprovider.Cluster, machine string) nodeprovider.NodeSpec {
	pool := &fkev1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.Name + ".pool", Namespace: "default"},
		Spec:       fkev1.NodePoolSpec{ClusterName: cluster.Name, PoolName: "pool", InstanceType: it.Name},
	}
	return nodeprovider.NodeSpec{
		MachineName:  machine,
		InstanceType: it,
		Template:     nodetemplate.Build(pool, it, cluster.Name+"-"+machine),
	}
}

// same reports whether two instances are the same instance (their states
// may differ: a new instance turns from Pending to Running).
func same(a, b nodeprovider.Instance) bool {
	return a.ProviderID == b.ProviderID && a.NodeName == b.NodeName && a.MachineName == b.MachineName
}

// contract lists what every Provider promises (see the Provider interface).
var contract = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, it *fkev1.InstanceType, p nodeprovider.Provider, a, b nodeprovider.Cluster)
}{
	{
		name: "Create returns the instance of the machine",
		run: func(t *testing.T, ctx context.Context, it *fkev1.InstanceType, p nodeprovider.Provider, a, _ nodeprovider.Cluster) {
			spec := nodeSpec(it, a, "m1")
			in, err := p.Create(ctx, a, spec)
			if err != nil {
				t.Fatal(err)
			}
			if in.ProviderID == "" || in.MachineName != "m1" || in.NodeName != spec.Template.Name {
				t.Fatalf("Create = %+v, want machine m1 on node %s with a provider ID", in, spec.Template.Name)
			}
			switch in.State {
			case nodeprovider.InstancePending, nodeprovider.InstanceRunning:
			default:
				t.Fatalf("Create = %+v, want state Pending or Running", in)
			}
		},
	},
	{
		name: "Create is idempotent per machine",
		run: func(t *testing.T, ctx context.Context, it *fkev1.InstanceType, p nodeprovider.Provider, a, _ nodeprovider.Cluster) {
			first, err := p.Create(ctx, a, nodeSpec(it, a, "m1"))
			if err != nil {
				t.Fatal(err)
			}
			second, err := p.Create(ctx, a, nodeSpec(it, a, "m1"))
			if err != nil || !same(second, first) {
				t.Fatalf("second Create = %+v, %v; want %+v", second, err, first)
			}
			list, err := p.List(ctx, a)
			if err != nil || len(list) != 1 {
				t.Fatalf("List = %+v, %v; want one instance", list, err)
			}
		},
	},
	{
		name: "Get returns a made instance",
		run: func(t *testing.T, ctx context.Context, it *fkev1.InstanceType, p nodeprovider.Provider, a, _ nodeprovider.Cluster) {
			in, err := p.Create(ctx, a, nodeSpec(it, a, "m1"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Get(ctx, a, in.ProviderID)
			if err != nil || !same(got, in) {
				t.Fatalf("Get = %+v, %v; want %+v", got, err, in)
			}
		},
	},
	{
		name: "Get of an unknown instance is NotFound",
		run: func(t *testing.T, ctx context.Context, it *fkev1.InstanceType, p nodeprovider.Provider, a, b nodeprovider.Cluster) {
			if _, err := p.Get(ctx, a, "none://a/nothing"); !nodeprovider.IsNotFound(err) {
				t.Errorf("Get of an unknown ID: %v, want NotFound", err)
			}
			in, err := p.Create(ctx, a, nodeSpec(it, a, "m1"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Get(ctx, b, in.ProviderID); !nodeprovider.IsNotFound(err) {
				t.Errorf("Get in another cluster: %v, want NotFound", err)
			}
		},
	},
	{
		name: "Delete removes the instance, then is NotFound",
		run: func(t *testing.T, ctx context.Context, it *fkev1.InstanceType, p nodeprovider.Provider, a, _ nodeprovider.Cluster) {
			in, err := p.Create(ctx, a, nodeSpec(it, a, "m1"))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Delete(ctx, a, in.ProviderID); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Get(ctx, a, in.ProviderID); !nodeprovider.IsNotFound(err) {
				t.Errorf("Get after Delete: %v, want NotFound", err)
			}
			if err := p.Delete(ctx, a, in.ProviderID); !nodeprovider.IsNotFound(err) {
				t.Errorf("second Delete: %v, want NotFound", err)
			}
			list, err := p.List(ctx, a)
			if err != nil || len(list) != 0 {
				t.Errorf("List after Delete = %+v, %v; want none", list, err)
			}
		},
	},
	{
		name: "List returns the cluster's instances only",
		run: func(t *testing.T, ctx context.Context, it *fkev1.InstanceType, p nodeprovider.Provider, a, b nodeprovider.Cluster) {
			var want []string
			for i := range 3 {
				in, err := p.Create(ctx, a, nodeSpec(it, a, fmt.Sprintf("m%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, in.ProviderID)
			}
			if _, err := p.Create(ctx, b, nodeSpec(it, b, "m9")); err != nil {
				t.Fatal(err)
			}
			list, err := p.List(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, in := range list {
				got = append(got, in.ProviderID)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("List = %v, want %v", got, want)
			}
		},
	},
	{
		name: "InstanceTypes returns part of the catalog",
		run: func(t *testing.T, ctx context.Context, it *fkev1.InstanceType, p nodeprovider.Provider, _, _ nodeprovider.Cluster) {
			catalog := []fkev1.InstanceType{*it.DeepCopy(), *H100.DeepCopy()}
			got, err := p.InstanceTypes(ctx, catalog)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range got {
				if !slices.ContainsFunc(catalog, func(c fkev1.InstanceType) bool { return c.Name == it.Name }) {
					t.Errorf("InstanceTypes returned %s, not in the catalog", it.Name)
				}
			}
		},
	},
	{
		name: "Release is idempotent",
		run: func(t *testing.T, ctx context.Context, it *fkev1.InstanceType, p nodeprovider.Provider, a, _ nodeprovider.Cluster) {
			if p.Name() == "" {
				t.Error("empty provider name")
			}
			for range 2 {
				if err := p.Release(ctx, a); err != nil {
					t.Fatal(err)
				}
			}
		},
	},
}

// Run runs the contract against the provider setUp returns, making nodes
// of instance type it (H100 when nil).
func Run(t *testing.T, setUp SetUp, it *fkev1.InstanceType) {
	if it == nil {
		it = H100
	}
	for _, c := range contract {
		t.Run(c.name, func(t *testing.T) {
			p, a, b := setUp(t)
			c.run(t, t.Context(), it, p, a, b)
		})
	}
}
