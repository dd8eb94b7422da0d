// Package integration tests the fke.dev API against the real management
// kube-apiserver that `fke up` runs.
package integration

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/test/testenv"
)

func meta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "default", Name: name} }

func TestAPIRejectsBadObjects(t *testing.T) {
	e := testenv.Up(t)
	c := e.Client()
	ctx := context.Background()

	pool := func(mut func(*fkev1.NodePool)) *fkev1.NodePool {
		np := &fkev1.NodePool{ObjectMeta: meta("demo.gpu"), Spec: fkev1.NodePoolSpec{ClusterName: "demo", PoolName: "gpu", InstanceType: "gpu-h100x8", Replicas: ptr.To[int32](1)}}
		mut(np)
		return np
	}
	cluster := func(name string, mut func(*fkev1.Cluster)) *fkev1.Cluster {
		cl := &fkev1.Cluster{ObjectMeta: meta(name)}
		mut(cl)
		return cl
	}
	itype := func(mut func(*fkev1.InstanceType)) *fkev1.InstanceType {
		it := &fkev1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "bad-type"}, Spec: fkev1.InstanceTypeSpec{
			CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi"),
		}}
		mut(it)
		return it
	}

	tests := []struct {
		name string
		obj  client.Object
		want string
	}{
		{"cluster name starting with a digit", cluster("1demo", func(*fkev1.Cluster) {}), "cluster name must be a DNS label"},
		{"cluster name too long", cluster(strings.Repeat("a", 41), func(*fkev1.Cluster) {}), "at most 40 characters"},
		{"bad version", cluster("v", func(c *fkev1.Cluster) { c.Spec.Version = "1.37" }), `spec.version`},
		{"bad pod CIDR", cluster("p", func(c *fkev1.Cluster) { c.Spec.Network.PodCIDR = "10.0.0.0/33" }), "podCIDR must be an IPv4 CIDR"},
		{"service CIDR too large", cluster("s", func(c *fkev1.Cluster) { c.Spec.Network.ServiceCIDR = "10.0.0.0/8" }), "prefix of /12 or longer"},
		{"unknown runtime", cluster("r", func(c *fkev1.Cluster) { c.Spec.Runtime = "docker" }), `Unsupported value: "docker"`},
		{"sharing replicas without sharing", cluster("g", func(c *fkev1.Cluster) { c.Spec.Addons.GPUAgent.Replicas = ptr.To[int32](4) }), "replicas > 1 needs sharing"},
		{"min greater than max", pool(func(p *fkev1.NodePool) {
			p.Spec.Replicas = nil
			p.Spec.Autoscaling = &fkev1.NodePoolAutoscaling{MinSize: 3, MaxSize: 1}
		}), "minSize must be less than or equal to maxSize"},
		{"negative replicas", pool(func(p *fkev1.NodePool) { p.Spec.Replicas = ptr.To[int32](-1) }), "spec.replicas"},
		{"replicas outside autoscaling range", pool(func(p *fkev1.NodePool) {
			p.Spec.Replicas = ptr.To[int32](5)
			p.Spec.Autoscaling = &fkev1.NodePoolAutoscaling{MinSize: 0, MaxSize: 3}
		}), "replicas must lie within autoscaling minSize..maxSize"},
		{"pool without cluster", pool(func(p *fkev1.NodePool) { p.Spec.ClusterName = "" }), "spec.clusterName"},
		{"pool name too long", pool(func(p *fkev1.NodePool) { p.Spec.PoolName = "gpu-" + strings.Repeat("x", 40) }), "spec.poolName: Too long"},
		{"pool name with capitals", pool(func(p *fkev1.NodePool) { p.Spec.PoolName = "GPU" }), "poolName must be a DNS label"},
		{"object name not CLUSTER.POOL", pool(func(p *fkev1.NodePool) { p.Name = "gpu" }), "a node pool is named CLUSTER.POOL"},
		{"new pool without poolName", pool(func(p *fkev1.NodePool) { p.Name, p.Spec.PoolName = "gpu", "" }), "spec.poolName is required"},
		{"bad utilization threshold", pool(func(p *fkev1.NodePool) {
			p.Spec.Autoscaling = &fkev1.NodePoolAutoscaling{MinSize: 0, MaxSize: 3, ScaleDownUtilizationThreshold: "1.5"}
		}), "scaleDownUtilizationThreshold"},
		{"bad price", itype(func(it *fkev1.InstanceType) { it.Spec.PricePerHour = "cheap" }), "pricePerHour"},
		{"zero GPUs", itype(func(it *fkev1.InstanceType) {
			it.Spec.GPU = &fkev1.InstanceGPU{Count: 0, Product: "NVIDIA-L4", MemoryMiB: 23034}
		}), "spec.gpu.count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Create(ctx, tt.obj)
			if err == nil {
				t.Fatalf("created %T %s, want rejection", tt.obj, tt.obj.GetName())
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
			// Nothing was stored.
			if err := c.Get(ctx, client.ObjectKeyFromObject(tt.obj), tt.obj.DeepCopyObject().(client.Object)); err == nil {
				t.Fatalf("rejected object %s exists", tt.obj.GetName())
			}
		})
	}

	// Immutable fields: a good object can be created, then not changed.
	np := pool(func(p *fkev1.NodePool) {})
	if err := c.Create(ctx, np); err != nil {
		t.Fatalf("creating a valid pool: %v", err)
	}
	before := np.DeepCopy()
	np.Spec.ClusterName = "other"
	if err := c.Patch(ctx, np, client.MergeFrom(before)); err == nil || !strings.Contains(err.Error(), "clusterName is immutable") {
		t.Fatalf("changing clusterName: want 'clusterName is immutable', got %v", err)
	}
	before = np.DeepCopy()
	np.Spec.PoolName = "other"
	if err := c.Patch(ctx, np, client.MergeFrom(before)); err == nil || !strings.Contains(err.Error(), "poolName is immutable") {
		t.Fatalf("changing poolName: want 'poolName is immutable', got %v", err)
	}
	m := &fkev1.Machine{ObjectMeta: meta("gpu-abc"), Spec: fkev1.MachineSpec{ClusterName: "demo", NodePoolName: "gpu", InstanceType: "gpu-h100x8", Provider: fkev1.ProviderKwok}}
	if err := c.Create(ctx, m); err != nil {
		t.Fatalf("creating a machine: %v", err)
	}
	mBefore := m.DeepCopy()
	m.Spec.InstanceType = "cpu-small"
	if err := c.Patch(ctx, m, client.MergeFrom(mBefore)); err == nil || !strings.Contains(err.Error(), "machine spec is immutable") {
		t.Fatalf("changing a machine: want 'machine spec is immutable', got %v", err)
	}

	// Defaults come from the schema.
	cl := &fkev1.Cluster{ObjectMeta: meta("defaults")}
	if err := c.Create(ctx, cl); err != nil {
		t.Fatalf("creating a minimal cluster: %v", err)
	}
	if cl.Spec.Version != "v1.37.2" || cl.Spec.Runtime != fkev1.RuntimeLocal || cl.Spec.Network.PodCIDR != "10.112.0.0/12" || cl.Spec.Network.ServiceCIDR != "10.96.0.0/16" {
		t.Fatalf("defaults not applied: %+v", cl.Spec)
	}
	clBefore := cl.DeepCopy()
	cl.Spec.Network.PodCIDR = "10.100.0.0/16"
	if err := c.Patch(ctx, cl, client.MergeFrom(clBefore)); err == nil || !strings.Contains(err.Error(), "network is immutable") {
		t.Fatalf("changing the network: want 'network is immutable', got %v", err)
	}
}

func TestCLIRejectsBadNames(t *testing.T) {
	e := testenv.Up(t)
	out := e.RunFail("cluster", "create", "Bad_Name")
	if !strings.Contains(out, `invalid cluster name "Bad_Name"`) {
		t.Fatalf("want a clear name error, got %s", out)
	}
	if out := e.RunFail("cluster", "get", "nope"); !strings.Contains(out, `cluster "nope" not found`) {
		t.Fatalf("want not found, got %s", out)
	}
	if out := e.RunFail("kubeconfig", "nope"); !strings.Contains(out, `cluster "nope" not found`) {
		t.Fatalf("want not found, got %s", out)
	}
	if out := e.RunFail("cluster", "list", "-o", "xml"); !strings.Contains(out, "unknown output format") {
		t.Fatalf("want output format error, got %s", out)
	}
	if list := e.MustRun("cluster", "list"); strings.Contains(list, "Bad_Name") {
		t.Fatal("a rejected cluster was created")
	}
}
