package admission

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

func TestPoolLabelsAndTaints(t *testing.T) {
	long := strings.Repeat("x", 10000)
	tests := []struct {
		name   string
		labels map[string]string
		taints []corev1.Taint
		want   string // "" = accepted
	}{
		{"good", map[string]string{"team": "ml", "example.com/tier": "gpu", "node-restriction.kubernetes.io/pool": "a", "empty": ""},
			[]corev1.Taint{{Key: "example.com/dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}, {Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoExecute}}, ""},
		{"label key with a space", map[string]string{"bad key": "x"}, nil, `label key "bad key" is not valid: name part must consist of alphanumeric characters`},
		{"label prefix not a subdomain", map[string]string{"Example_com/x": "y"}, nil, `label key "Example_com/x" is not valid: prefix part`},
		{"label value with a space", map[string]string{"team": "a b"}, nil, `label "team": value is not valid: a valid label must be an empty string or consist of alphanumeric characters`},
		{"label value of 10000 characters", map[string]string{"team": long}, nil, `label "team": value is not valid: must be no more than 63 bytes`},
		{"reserved kubernetes.io", map[string]string{"kubernetes.io/hostname": "x"}, nil, `label key "kubernetes.io/hostname" uses a prefix reserved for Kubernetes and fke`},
		{"reserved node.kubernetes.io", map[string]string{"node.kubernetes.io/instance-type": "x"}, nil, "uses a prefix reserved"},
		{"reserved k8s.io subdomain", map[string]string{"x.k8s.io/a": "x"}, nil, "uses a prefix reserved"},
		{"reserved fke.dev", map[string]string{"fke.dev/nodepool": "x"}, nil, "uses a prefix reserved"},
		{"topology labels allowed", map[string]string{"topology.kubernetes.io/zone": "local-b", "topology.kubernetes.io/region": "local"}, nil, ""},
		{"other topology label reserved", map[string]string{"topology.kubernetes.io/rack": "r1"}, nil, "uses a prefix reserved"},
		{"not reserved: lookalike domain", map[string]string{"notkubernetes.io/a": "x", "fke.dev.example.com/a": "y"}, nil, ""},
		{"taint key invalid", nil, []corev1.Taint{{Key: "a b", Effect: corev1.TaintEffectNoSchedule}}, `taint key "a b" is not valid`},
		{"taint key empty", nil, []corev1.Taint{{Key: "", Effect: corev1.TaintEffectNoSchedule}}, `taint key "" is not valid`},
		{"taint key reserved", nil, []corev1.Taint{{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule}}, `taint key "node.kubernetes.io/unschedulable" uses a prefix reserved`},
		{"taint value too long", nil, []corev1.Taint{{Key: "a", Value: long, Effect: corev1.TaintEffectNoSchedule}}, `taint "a": value is not valid: must be no more than 63 bytes`},
		{"taint effect", nil, []corev1.Taint{{Key: "a", Effect: "Sometimes"}}, `taint "a": effect "Sometimes" is not one of NoSchedule, PreferNoSchedule, NoExecute`},
		{"taint twice", nil, []corev1.Taint{{Key: "a", Value: "x", Effect: corev1.TaintEffectNoSchedule}, {Key: "a", Value: "y", Effect: corev1.TaintEffectNoSchedule}}, `taint "a" with effect NoSchedule appears twice`},
		{"same key, other effect", nil, []corev1.Taint{{Key: "a", Effect: corev1.TaintEffectNoSchedule}, {Key: "a", Effect: corev1.TaintEffectNoExecute}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(PoolLabelsAndTaints(tt.labels, tt.taints), "\n")
			switch {
			case tt.want == "" && got != "":
				t.Fatalf("refused: %s", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			if strings.Contains(got, strings.Repeat("x", 100)) {
				t.Fatalf("the message repeats a long value: %.200s", got)
			}
		})
	}
}

func TestNodeRoomAndCheckRoom(t *testing.T) {
	for cidr, want := range map[string]int64{"10.112.0.0/12": 4096, "10.0.0.0/20": 16, "10.0.0.0/24": 1, "10.0.0.0/25": 0} {
		if got, ok := NodeRoom(cidr); !ok || got != want {
			t.Errorf("NodeRoom(%s) = %d, %t; want %d", cidr, got, ok, want)
		}
	}
	for _, cidr := range []string{"", "fd00::/48", "nonsense"} {
		if _, ok := NodeRoom(cidr); ok {
			t.Errorf("NodeRoom(%q) known, want unknown", cidr)
		}
	}
	cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}
	cl.Spec.Network.PodCIDR = "10.0.0.0/20"
	if msg := CheckRoom(cl, map[string]int64{"a": 10, "b": 6}); msg != "" {
		t.Errorf("16 nodes in a /20 refused: %s", msg)
	}
	msg := CheckRoom(cl, map[string]int64{"gpu": 16, "cpu": 4})
	want := "cluster demo's podCIDR 10.0.0.0/20 has room for 16 nodes (a /24 each), but its node pools could reach 20 (cpu 4, gpu 16)"
	if !strings.Contains(msg, want) {
		t.Errorf("got %q, want %q", msg, want)
	}
	cl.Spec.Network.PodCIDR = ""
	if msg := CheckRoom(cl, map[string]int64{"gpu": 100000}); msg != "" {
		t.Errorf("an unset podCIDR is checked: %s", msg)
	}
	if got := PoolMaximum(fkev1.NodePoolSpec{Replicas: ptr.To[int32](3), Autoscaling: &fkev1.NodePoolAutoscaling{MinSize: 0, MaxSize: 8}}); got != 8 {
		t.Errorf("PoolMaximum = %d, want 8", got)
	}
}

func TestCheckCluster(t *testing.T) {
	mk := func(version string, maxNodes int32) *fkev1.Cluster {
		cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}
		cl.Spec.Version = version
		cl.Spec.Network.PodCIDR = "10.0.0.0/20"
		cl.Spec.Autoscaling.MaxNodes = maxNodes
		return cl
	}
	tests := []struct {
		name    string
		cl, old *fkev1.Cluster
		want    string
	}{
		{"create runnable", mk("v1.37.2", 0), nil, ""},
		{"create unknown version", mk("v1.99.0", 0), nil, `spec.version: Kubernetes version "v1.99.0" is not available in this fke: use one of v1.36.3, v1.37.2`},
		{"create on the older minor", mk("v1.36.3", 0), nil, ""},
		{"upgrade one minor", mk("v1.37.2", 0), mk("v1.36.3", 0), ""},
		{"skip a minor", mk("v1.37.2", 0), mk("v1.35.0", 0), "upgrade one minor version at a time (to v1.36.x first)"},
		{"downgrade", mk("v1.36.3", 0), mk("v1.37.2", 0), "downgrades are not supported"},
		{"update to an unknown version", mk("v1.38.0", 0), mk("v1.37.2", 0), `Kubernetes version "v1.38.0" is not available`},
		{"update back", mk("v1.37.2", 0), mk("v1.38.1", 0), "downgrades are not supported"},
		{"legacy version kept", mk("v1.99.0", 4), mk("v1.99.0", 0), ""},
		{"maxNodes beyond the pod range", mk("v1.37.2", 17), nil, "spec.autoscaling: autoscaling.maxNodes 17 is more than podCIDR 10.0.0.0/20 has room for (16 nodes"},
		{"maxNodes within", mk("v1.37.2", 16), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(CheckCluster(tt.cl, tt.old), "\n")
			switch {
			case tt.want == "" && got != "":
				t.Fatalf("refused: %s", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckProvider(t *testing.T) {
	avail := []fkev1.ProviderName{fkev1.ProviderKwok}
	if msg := CheckProvider(fkev1.ProviderKwok, avail); msg != "" {
		t.Errorf("kwok refused: %s", msg)
	}
	want := `spec.provider: node provider "local" is not available in this installation; available providers: kwok`
	if msg := CheckProvider(fkev1.ProviderLocal, avail); msg != want {
		t.Errorf("got %q, want %q", msg, want)
	}
}

func TestCheckNodePool(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fkev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	demo := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo"}}
	demo.Spec.Network.PodCIDR = "10.0.0.0/20"
	gone := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gone", DeletionTimestamp: ptr.To(metav1.Now()), Finalizers: []string{fkev1.ClusterFinalizer}}}
	it := &fkev1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "cpu-small"}}
	existing := &fkev1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo.cpu"},
		Spec: fkev1.NodePoolSpec{ClusterName: "demo", InstanceType: "cpu-small", Replicas: ptr.To[int32](10)}}
	// A pool from before per-cluster names, with a label no longer accepted
	// and more nodes than its cluster's pod range holds.
	small := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "small"}}
	small.Spec.Network.PodCIDR = "10.0.0.0/24"
	legacy := &fkev1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "big"},
		Spec: fkev1.NodePoolSpec{ClusterName: "small", InstanceType: "cpu-small", Replicas: ptr.To[int32](2), Labels: map[string]string{"kubernetes.io/role": "x"}}}
	old := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "old"}}
	old.Spec.Version = "v1.36.3"
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(demo, gone, small, old, it, existing, legacy).Build()
	v := New(scheme, c, func() []fkev1.ProviderName { return []fkev1.ProviderName{fkev1.ProviderKwok} })

	pool := func(mut func(*fkev1.NodePool)) *fkev1.NodePool {
		np := &fkev1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo.gpu"},
			Spec: fkev1.NodePoolSpec{ClusterName: "demo", InstanceType: "cpu-small", Provider: fkev1.ProviderKwok, Replicas: ptr.To[int32](2)}}
		mut(np)
		return np
	}
	type poolCase struct {
		name    string
		np, old *fkev1.NodePool
		want    string
	}
	tests := []poolCase{
		{"good", pool(func(*fkev1.NodePool) {}), nil, ""},
		{"no such cluster", pool(func(np *fkev1.NodePool) { np.Spec.ClusterName = "nope" }), nil,
			"spec.clusterName: cluster \"nope\" does not exist in namespace default: create it first (`fke cluster create nope`) or list the clusters with `fke cluster list`"},
		{"cluster being deleted", pool(func(np *fkev1.NodePool) { np.Spec.ClusterName = "gone" }), nil, `cluster "gone" is being deleted`},
		{"no such instance type", pool(func(np *fkev1.NodePool) { np.Spec.InstanceType = "gpu-x" }), nil,
			"spec.instanceType: instance type \"gpu-x\" does not exist: list the available ones with `fke instancetypes`"},
		{"provider not available", pool(func(np *fkev1.NodePool) { np.Spec.Provider = fkev1.ProviderLocal }), nil,
			`node provider "local" is not available in this installation; available providers: kwok`},
		{"no room", pool(func(np *fkev1.NodePool) { np.Spec.Autoscaling = &fkev1.NodePoolAutoscaling{MaxSize: 7} }), nil,
			"has room for 16 nodes (a /24 each), but its node pools could reach 17 (demo.cpu 10, demo.gpu 7)"},
		{"grow beyond room", pool(func(np *fkev1.NodePool) { np.Spec.Replicas = ptr.To[int32](7) }), pool(func(*fkev1.NodePool) {}), "could reach 17"},
		{"shrink a pool that had no room", pool(func(np *fkev1.NodePool) { np.Spec.Replicas = ptr.To[int32](8) }), pool(func(np *fkev1.NodePool) { np.Spec.Replicas = ptr.To[int32](9) }), ""},
		{"bad label", pool(func(np *fkev1.NodePool) { np.Spec.Labels = map[string]string{"team": "a b"} }), nil, `label "team": value is not valid`},
		{"bad label kept on update", pool(func(np *fkev1.NodePool) {
			np.Spec.Labels = map[string]string{"team": "a b"}
			np.Spec.Replicas = ptr.To[int32](1)
		}),
			pool(func(np *fkev1.NodePool) { np.Spec.Labels = map[string]string{"team": "a b"} }), ""},
		{"pinned to the older minor", pool(func(np *fkev1.NodePool) { np.Spec.Version = "v1.36.3" }), nil, ""},
		{"pinned newer than the cluster", pool(func(np *fkev1.NodePool) { np.Spec.Version = "v1.37.2"; np.Spec.ClusterName = "old" }), nil,
			"spec.version: nodes at v1.37.2 would be newer than their control plane at v1.36.3: upgrade the cluster first"},
		{"pinned to a version fke does not run", pool(func(np *fkev1.NodePool) { np.Spec.Version = "v1.35.0" }), nil, `spec.version: Kubernetes version "v1.35.0" is not available`},
		{"several problems at once", pool(func(np *fkev1.NodePool) { np.Spec.ClusterName = "nope"; np.Spec.InstanceType = "gpu-x" }), nil, `instance type "gpu-x" does not exist`},
	}
	renamed := func(from string) *fkev1.NodePool {
		np := legacy.DeepCopy()
		np.ResourceVersion = ""
		np.Name, np.Spec.PoolName = "small.big", "big"
		np.Annotations = map[string]string{fkev1.AnnotationRenamedFrom: from}
		return np
	}
	tests = append(tests,
		poolCase{"the manager's rename of a legacy pool", renamed("big"), nil, ""},
		poolCase{"a copy that names no legacy pool", renamed("nothing"), nil, `label key "kubernetes.io/role" uses a prefix reserved`},
		poolCase{"a copy naming no legacy pool counts beside it", renamed("nothing"), nil, "could reach 4 (big 2, small.big 2)"},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := tt.old
			if old == nil {
				var err error
				if old, err = v.renamedFrom(context.Background(), tt.np); err != nil {
					t.Fatal(err)
				}
			}
			msgs, err := v.checkNodePool(context.Background(), tt.np, old)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(msgs, "\n")
			switch {
			case tt.want == "" && got != "":
				t.Fatalf("refused: %s", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}
