package nodeprovider_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/nodeprovider/fake"
	"fke.dev/fke/internal/nodetemplate"
)

// implementation is one Provider under the contract test, with the
// clusters it is used with.
type implementation struct {
	name string
	// setUp returns a fresh provider and two clusters it can make nodes in.
	setUp func(t *testing.T) (p nodeprovider.Provider, a, b nodeprovider.Cluster)
}

// implementations lists the providers that run without binaries; the kwok
// provider is checked against a real cluster in its own package.
var implementations = []implementation{
	{
		name: "fake",
		setUp: func(*testing.T) (nodeprovider.Provider, nodeprovider.Cluster, nodeprovider.Cluster) {
			return fake.New(),
				nodeprovider.Cluster{Key: "default/a", Name: "a", PodCIDR: "10.244.0.0/16"},
				nodeprovider.Cluster{Key: "default/b", Name: "b", PodCIDR: "10.244.0.0/16"}
		},
	},
}

var h100 = &fkev1.InstanceType{
	ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100x8"},
	Spec: fkev1.InstanceTypeSpec{
		CPU:    resource.MustParse("96"),
		Memory: resource.MustParse("1Ti"),
		GPU:    &fkev1.InstanceGPU{Count: 8, Product: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559},
	},
}

func nodeSpec(cluster nodeprovider.Cluster, machine string) nodeprovider.NodeSpec {
	pool := &fkev1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "demo.gpu", Namespace: "default"},
		Spec:       fkev1.NodePoolSpec{ClusterName: cluster.Name, PoolName: "gpu", InstanceType: h100.Name},
	}
	return nodeprovider.NodeSpec{
		MachineName:  machine,
		InstanceType: h100,
		Template:     nodetemplate.Build(pool, h100, cluster.Name+"-"+machine),
	}
}

// contract lists what every Provider promises (see the Provider interface).
var contract = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, p nodeprovider.Provider, a, b nodeprovider.Cluster)
}{
	{
		name: "Create returns the instance of the machine",
		run: func(t *testing.T, ctx context.Context, p nodeprovider.Provider, a, _ nodeprovider.Cluster) {
			spec := nodeSpec(a, "m1")
			in, err := p.Create(ctx, a, spec)
			if err != nil {
				t.Fatal(err)
			}
			if in.ProviderID == "" || in.MachineName != "m1" || in.NodeName != spec.Template.Name {
				t.Fatalf("Create = %+v, want machine m1 on node %s with a provider ID", in, spec.Template.Name)
			}
		},
	},
	{
		name: "Create is idempotent per machine",
		run: func(t *testing.T, ctx context.Context, p nodeprovider.Provider, a, _ nodeprovider.Cluster) {
			first, err := p.Create(ctx, a, nodeSpec(a, "m1"))
			if err != nil {
				t.Fatal(err)
			}
			second, err := p.Create(ctx, a, nodeSpec(a, "m1"))
			if err != nil || second != first {
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
		run: func(t *testing.T, ctx context.Context, p nodeprovider.Provider, a, _ nodeprovider.Cluster) {
			in, err := p.Create(ctx, a, nodeSpec(a, "m1"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Get(ctx, a, in.ProviderID)
			if err != nil || got != in {
				t.Fatalf("Get = %+v, %v; want %+v", got, err, in)
			}
		},
	},
	{
		name: "Get of an unknown instance is NotFound",
		run: func(t *testing.T, ctx context.Context, p nodeprovider.Provider, a, b nodeprovider.Cluster) {
			if _, err := p.Get(ctx, a, "none://a/nothing"); !nodeprovider.IsNotFound(err) {
				t.Errorf("Get of an unknown ID: %v, want NotFound", err)
			}
			in, err := p.Create(ctx, a, nodeSpec(a, "m1"))
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
		run: func(t *testing.T, ctx context.Context, p nodeprovider.Provider, a, _ nodeprovider.Cluster) {
			in, err := p.Create(ctx, a, nodeSpec(a, "m1"))
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
		run: func(t *testing.T, ctx context.Context, p nodeprovider.Provider, a, b nodeprovider.Cluster) {
			var want []string
			for i := range 3 {
				in, err := p.Create(ctx, a, nodeSpec(a, fmt.Sprintf("m%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, in.ProviderID)
			}
			if _, err := p.Create(ctx, b, nodeSpec(b, "m9")); err != nil {
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
		run: func(t *testing.T, ctx context.Context, p nodeprovider.Provider, _, _ nodeprovider.Cluster) {
			catalog := []fkev1.InstanceType{*h100.DeepCopy()}
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
		run: func(t *testing.T, ctx context.Context, p nodeprovider.Provider, a, _ nodeprovider.Cluster) {
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

func TestProviderContract(t *testing.T) {
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			for _, c := range contract {
				t.Run(c.name, func(t *testing.T) {
					p, a, b := impl.setUp(t)
					c.run(t, t.Context(), p, a, b)
				})
			}
		})
	}
}
