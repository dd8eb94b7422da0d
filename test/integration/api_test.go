// Package integration tests the fke.dev API against the real management
// kube-apiserver that `fke up` runs.
package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/test/testenv"
)

func meta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "default", Name: name} }

// TestAPIRejectsBadObjects creates invalid objects against the management
// API server that `fke up` runs, with fke-manager's admission webhook in
// place, and expects each refused with the message that says what to fix
// and nothing stored: CEL rules of the CRD schema and webhook checks alike.
func TestAPIRejectsBadObjects(t *testing.T) {
	e := testenv.Up(t)
	c := e.Client()
	ctx := context.Background()

	// The cluster the pools below belong to; its /20 pod range holds 16 nodes.
	demo := &fkev1.Cluster{ObjectMeta: meta("demo")}
	demo.Spec.Network.PodCIDR = "10.112.0.0/20"
	if err := c.Create(ctx, demo); err != nil {
		t.Fatalf("creating cluster demo: %v", err)
	}

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

	release := func(mut func(*fkev1.ReleaseSource)) *fkev1.Release {
		rel := &fkev1.Release{ObjectMeta: meta("app"), Spec: fkev1.ReleaseSpec{
			Source: fkev1.ReleaseSource{URL: "file:///srv/git/app", Path: "chart"},
			Stages: []fkev1.ReleaseStage{{Name: "dev", Clusters: []string{"demo"}}},
		}}
		mut(&rel.Spec.Source)
		return rel
	}

	tests := []struct {
		name string
		obj  client.Object
		want string
	}{
		// Releases: no path may leave the repository (deploy.Render
		// refuses them again when it renders).
		{"release values file above the repository", release(func(s *fkev1.ReleaseSource) { s.ValuesFiles = []string{"../../../management.kubeconfig"} }),
			"valuesFiles are relative to the repository root and may not contain '..'"},
		{"release values file by absolute path", release(func(s *fkev1.ReleaseSource) { s.ValuesFiles = []string{"values.yaml", "/etc/passwd"} }),
			"valuesFiles are relative to the repository root and may not contain '..'"},
		{"release path above the repository", release(func(s *fkev1.ReleaseSource) { s.Path = "chart/../../x" }),
			"path is relative to the repository root and may not contain '..'"},
		{"cluster name starting with a digit", cluster("1demo", func(*fkev1.Cluster) {}), "cluster name must be a DNS label"},
		{"cluster name too long", cluster(strings.Repeat("a", 41), func(*fkev1.Cluster) {}), "at most 40 characters"},
		{"bad version", cluster("v", func(c *fkev1.Cluster) { c.Spec.Version = "1.37" }), `spec.version`},
		{"bad pod CIDR", cluster("p", func(c *fkev1.Cluster) { c.Spec.Network.PodCIDR = "10.0.0.0/33" }), "podCIDR must be an IPv4 CIDR"},
		{"service CIDR too large", cluster("s", func(c *fkev1.Cluster) { c.Spec.Network.ServiceCIDR = "10.0.0.0/8" }), "prefix of /12 or longer"},
		{"unknown runtime", cluster("r", func(c *fkev1.Cluster) { c.Spec.Runtime = "docker" }), `Unsupported value: "docker"`},
		{"sharing replicas without sharing", cluster("g", func(c *fkev1.Cluster) { c.Spec.Addons.GPUAgent.Replicas = ptr.To[int32](4) }), "replicas > 1 needs sharing"},
		{"VPA without metrics-server", cluster("vpa", func(c *fkev1.Cluster) {
			c.Spec.Addons.VerticalPodAutoscaler.Enabled = true
			c.Spec.Addons.MetricsServer.Enabled = ptr.To(false)
		}), "the vertical pod autoscaler reads usage from metrics-server"},
		{"maintenance window too short", cluster("mw", func(c *fkev1.Cluster) {
			c.Spec.Maintenance = &fkev1.MaintenanceWindow{Start: "22:00", Duration: metav1.Duration{Duration: 10 * time.Minute}}
		}), "maintenance duration must be between 30m and 24h"},
		{"maintenance start not HH:MM", cluster("ms", func(c *fkev1.Cluster) {
			c.Spec.Maintenance = &fkev1.MaintenanceWindow{Start: "25:00", Duration: metav1.Duration{Duration: time.Hour}}
		}), "spec.maintenance.start"},
		{"backups to S3 without credentials", cluster("s3c", func(c *fkev1.Cluster) {
			c.Spec.Backup = &fkev1.ClusterBackup{S3: &fkev1.S3Store{Endpoint: "https://s3.example.com", Bucket: "snapshots"}}
		}), "spec.backup.s3.secretRef.name"},
		{"backups to an S3 endpoint with a path", cluster("s3e", func(c *fkev1.Cluster) {
			c.Spec.Backup = &fkev1.ClusterBackup{S3: &fkev1.S3Store{Endpoint: "https://s3.example.com/snapshots", Bucket: "snapshots", SecretRef: fkev1.LocalObjectReference{Name: "s3"}}}
		}), "endpoint must be the store's http:// or https:// URL without a path or query"},
		{"unknown auto-upgrade policy", cluster("au", func(c *fkev1.Cluster) { c.Spec.AutoUpgrade = "major" }), `Unsupported value: "major"`},
		{"pool pinned to a malformed version", pool(func(p *fkev1.NodePool) { p.Spec.Version = "1.37" }), "spec.version"},
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

		// Clusters: versions and networks.
		{"version this fke cannot run", cluster("v99", func(c *fkev1.Cluster) { c.Spec.Version = "v1.99.0" }),
			`Kubernetes version "v1.99.0" is not available in this fke: use one of v1.36.3, v1.37.2 (` + "`fke versions`" + ` lists them)`},
		{"pod CIDR equals service CIDR", cluster("same", func(c *fkev1.Cluster) {
			c.Spec.Network = fkev1.ClusterNetwork{PodCIDR: "10.96.0.0/16", ServiceCIDR: "10.96.0.0/16"}
		}), "podCIDR 10.96.0.0/16 and serviceCIDR 10.96.0.0/16 overlap: pods and Services need separate ranges"},
		{"service CIDR inside pod CIDR", cluster("inside", func(c *fkev1.Cluster) {
			c.Spec.Network = fkev1.ClusterNetwork{PodCIDR: "10.96.0.0/12", ServiceCIDR: "10.100.0.0/16"}
		}), "podCIDR 10.96.0.0/12 and serviceCIDR 10.100.0.0/16 overlap"},
		{"maxNodes beyond the pod range", cluster("small", func(c *fkev1.Cluster) {
			c.Spec.Network.PodCIDR = "10.112.0.0/20"
			c.Spec.Autoscaling.MaxNodes = 17
		}), "autoscaling.maxNodes 17 is more than podCIDR 10.112.0.0/20 has room for (16 nodes, a /24 each)"},

		// Node pools: labels and taints.
		{"label value of 10000 characters", pool(func(p *fkev1.NodePool) { p.Spec.Labels = map[string]string{"team": strings.Repeat("x", 10000)} }),
			"label team: a label value must be at most 63 characters"},
		{"label key not a qualified name", pool(func(p *fkev1.NodePool) { p.Spec.Labels = map[string]string{"bad key": "x"} }),
			"label key bad key is not a valid Kubernetes label key"},
		{"label key reserved", pool(func(p *fkev1.NodePool) { p.Spec.Labels = map[string]string{"node.kubernetes.io/instance-type": "x"} }),
			"label key node.kubernetes.io/instance-type uses a prefix reserved for Kubernetes and fke"},
		{"label key reserved for fke", pool(func(p *fkev1.NodePool) { p.Spec.Labels = map[string]string{"fke.dev/nodepool": "other"} }),
			"label key fke.dev/nodepool uses a prefix reserved"},
		{"label value with a space", pool(func(p *fkev1.NodePool) { p.Spec.Labels = map[string]string{"team": "a b"} }),
			`label "team": value is not valid`},
		{"taint effect", pool(func(p *fkev1.NodePool) { p.Spec.Taints = []corev1.Taint{{Key: "a", Effect: "Sometimes"}} }),
			"a taint effect must be NoSchedule, PreferNoSchedule or NoExecute"},
		{"taint value of 10000 characters", pool(func(p *fkev1.NodePool) {
			p.Spec.Taints = []corev1.Taint{{Key: "a", Value: strings.Repeat("x", 10000), Effect: corev1.TaintEffectNoSchedule}}
		}), "a taint value at most 63"},
		{"taint key not a qualified name", pool(func(p *fkev1.NodePool) {
			p.Spec.Taints = []corev1.Taint{{Key: "a b", Effect: corev1.TaintEffectNoSchedule}}
		}), `taint key "a b" is not valid`},
		{"taint key reserved", pool(func(p *fkev1.NodePool) {
			p.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule}}
		}), `taint key "node.kubernetes.io/unschedulable" uses a prefix reserved`},
		{"taint twice", pool(func(p *fkev1.NodePool) {
			p.Spec.Taints = []corev1.Taint{{Key: "a", Value: "x", Effect: corev1.TaintEffectNoSchedule}, {Key: "a", Value: "y", Effect: corev1.TaintEffectNoSchedule}}
		}), `taint "a" with effect NoSchedule appears twice`},

		// Node pools: what they refer to.
		{"cluster that does not exist", pool(func(p *fkev1.NodePool) { p.Name, p.Spec.ClusterName = "nope.gpu", "nope" }),
			`cluster "nope" does not exist in namespace default: create it first`},
		{"instance type that does not exist", pool(func(p *fkev1.NodePool) { p.Spec.InstanceType = "gpu-x" }),
			"instance type \"gpu-x\" does not exist: list the available ones with `fke instancetypes`"},
		{"more nodes than the pod range holds", pool(func(p *fkev1.NodePool) {
			p.Spec.Replicas = nil
			p.Spec.Autoscaling = &fkev1.NodePoolAutoscaling{MinSize: 0, MaxSize: 17}
		}), "cluster demo's podCIDR 10.112.0.0/20 has room for 16 nodes (a /24 each), but its node pools could reach 17"},

		// Instance types.
		{"cpu zero", itype(func(it *fkev1.InstanceType) { it.Spec.CPU = resource.MustParse("0") }), "cpu must be greater than zero, such as 4 or 500m (got 0)"},
		{"cpu negative", itype(func(it *fkev1.InstanceType) { it.Spec.CPU = resource.MustParse("-4") }), "cpu must be greater than zero, such as 4 or 500m (got -4)"},
		{"memory zero", itype(func(it *fkev1.InstanceType) { it.Spec.Memory = resource.MustParse("0") }), "memory must be greater than zero"},
		{"pods negative", itype(func(it *fkev1.InstanceType) { it.Spec.Pods = -1 }), "spec.pods"},
		{"price negative", itype(func(it *fkev1.InstanceType) { it.Spec.PricePerHour = "-1" }), "pricePerHour must be a non-negative decimal such as 2.50 (got -1)"},
		{"MIG profile malformed", itype(func(it *fkev1.InstanceType) {
			it.Spec.GPU = &fkev1.InstanceGPU{Count: 1, Product: "NVIDIA-A100", MemoryMiB: 81920, MIGProfiles: []string{"1g.10gb", "10gb"}}
		}), "MIG profile 10gb is not well formed"},
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

	// The provider must be one this manager runs (`local` is refused until
	// the manager registers it). Where it runs, a local pool is refused on
	// a cluster whose pod range overlaps that of a cluster with local pools.
	t.Run("local pools: the provider must be available, the pod range free", func(t *testing.T) {
		np := pool(func(p *fkev1.NodePool) {
			p.Name, p.Spec.PoolName, p.Spec.Provider, p.Spec.Replicas = "demo.local", "local", fkev1.ProviderLocal, ptr.To[int32](0)
		})
		err := c.Create(ctx, np)
		if err == nil {
			defer func() {
				if err := c.Delete(ctx, np); err != nil {
					t.Error(err)
				}
			}()
			testLocalPoolOverlap(t, c)
			return
		}
		if want := `node provider "local" is not available in this installation; available providers: kwok`; !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not contain %q", err, want)
		}
	})

	// Immutable fields: a good object (with labels and taints a user may
	// set) can be created, then not changed.
	np := pool(func(p *fkev1.NodePool) {
		p.Spec.Labels = map[string]string{"example.com/team": "ml", "topology.kubernetes.io/zone": "local-b", "node-restriction.kubernetes.io/tier": "gold", "empty": ""}
		p.Spec.Taints = []corev1.Taint{{Key: "example.com/dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}, {Key: "example.com/dedicated", Value: "ml", Effect: corev1.TaintEffectNoExecute}}
	})
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
	if cl.Spec.Version != "v1.37.2" || cl.Spec.Runtime != fkev1.RuntimeLocal || cl.Spec.Network.ServiceCIDR != "10.96.0.0/16" {
		t.Fatalf("defaults not applied: %+v", cl.Spec)
	}
	if a := cl.Spec.Addons; a.MetricsServer.Enabled == nil || !*a.MetricsServer.Enabled || a.GPUMetrics.Enabled == nil || !*a.GPUMetrics.Enabled {
		t.Fatalf("metrics-server and GPU metrics are not on by default: %+v", a)
	}
	// The manager picks a free pod range and records it, once.
	testenv.Eventually(t, 30*time.Second, "pod range picked", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cl), cl); err != nil {
			return err
		}
		if cl.Spec.Network.PodCIDR == "" {
			return errors.New("spec.network.podCIDR is empty")
		}
		return nil
	})
	if !strings.HasSuffix(cl.Spec.Network.PodCIDR, "/14") {
		t.Fatalf("picked pod range %s, want a /14", cl.Spec.Network.PodCIDR)
	}
	for field, mut := range map[string]func(*fkev1.Cluster){
		"podCIDR is immutable once set": func(c *fkev1.Cluster) { c.Spec.Network.PodCIDR = "10.100.0.0/16" },
		"serviceCIDR is immutable":      func(c *fkev1.Cluster) { c.Spec.Network.ServiceCIDR = "10.97.0.0/16" },
	} {
		changed := cl.DeepCopy()
		mut(changed)
		if err := c.Patch(ctx, changed, client.MergeFrom(cl)); err == nil || !strings.Contains(err.Error(), field) {
			t.Fatalf("changing the network: want %q, got %v", field, err)
		}
	}

	// Version changes: never back, one minor at most, and only to what this fke runs.
	for _, tt := range []struct{ to, want string }{
		{"v1.36.3", "cannot change version from v1.37.2 back to v1.36.3: downgrades are not supported"},
		{"v1.39.0", "cannot upgrade from v1.37.2 to v1.39.0: upgrade one minor version at a time"},
		{"v1.38.0", `Kubernetes version "v1.38.0" is not available in this fke`},
	} {
		cur := &fkev1.Cluster{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cl), cur); err != nil {
			t.Fatal(err)
		}
		before := cur.DeepCopy()
		cur.Spec.Version = tt.to
		if err := c.Patch(ctx, cur, client.MergeFrom(before)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("version %s -> %s: want %q, got %v", before.Spec.Version, tt.to, tt.want, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cl), cl); err != nil || cl.Spec.Version != "v1.37.2" {
		t.Fatalf("a refused version change was stored: %q, %v", cl.Spec.Version, err)
	}
}

// testLocalPoolOverlap: with a local pool on cluster demo (pod range
// 10.112.0.0/20), a local pool on a cluster whose pod range overlaps it is
// refused when it is created, naming both clusters and both ranges; a kwok
// pool there is not.
func testLocalPoolOverlap(t *testing.T, c client.Client) {
	ctx := t.Context()
	cl := &fkev1.Cluster{ObjectMeta: meta("overlap")}
	cl.Spec.Network.PodCIDR = "10.112.0.0/16"
	if err := c.Create(ctx, cl); err != nil {
		t.Fatalf("creating cluster overlap: %v", err)
	}
	defer func() {
		if err := c.Delete(ctx, cl); err != nil {
			t.Error(err)
		}
	}()
	np := &fkev1.NodePool{ObjectMeta: meta("overlap.cpu"), Spec: fkev1.NodePoolSpec{
		ClusterName: "overlap", PoolName: "cpu", InstanceType: "cpu-small", Provider: fkev1.ProviderLocal, Replicas: ptr.To[int32](1)}}
	err := c.Create(ctx, np)
	want := "cluster default/overlap's pod range 10.112.0.0/16 overlaps pod range 10.112.0.0/20 of cluster default/demo, which uses local nodes"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("creating a local pool on an overlapping cluster: got %v, want %q", err, want)
	}
	np.Spec.Provider, np.Spec.Replicas = fkev1.ProviderKwok, ptr.To[int32](0)
	if err := c.Create(ctx, np); err != nil {
		t.Fatalf("creating a kwok pool on an overlapping cluster: %v", err)
	}
	if err := c.Delete(ctx, np); err != nil {
		t.Error(err)
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
