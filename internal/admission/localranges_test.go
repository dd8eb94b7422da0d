package admission

import (
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

func rangeCluster(ns, name, podCIDR string) fkev1.Cluster {
	cl := fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	cl.Spec.Network.PodCIDR = podCIDR
	return cl
}

func rangePool(ns, cluster, pool string, provider fkev1.ProviderName) fkev1.NodePool {
	return fkev1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster + "." + pool},
		Spec: fkev1.NodePoolSpec{ClusterName: cluster, PoolName: pool, InstanceType: "cpu-small", Provider: provider, Replicas: ptr.To[int32](1)}}
}

func TestCheckLocalPodRangeOfPools(t *testing.T) {
	local, kwok := fkev1.ProviderLocal, fkev1.ProviderKwok
	a := rangeCluster("default", "a", "10.112.0.0/14")
	clusters := []fkev1.Cluster{
		a,
		rangeCluster("team", "b", "10.112.0.0/16"), // inside a's range
		rangeCluster("default", "c", "10.128.0.0/14"),
		rangeCluster("default", "d", "172.16.0.0/12"), // holds the local node addresses
		rangeCluster("default", "e", ""),              // range not chosen yet
		rangeCluster("team", "f", "10.113.0.0/16"),    // inside a's range too
	}
	tests := []struct {
		name    string
		cluster fkev1.Cluster
		pools   []fkev1.NodePool
		want    []string // substrings of the refusal; none: accepted
	}{
		{"no local pool anywhere", clusters[1], []fkev1.NodePool{rangePool("team", "b", "cpu", kwok), rangePool("default", "a", "cpu", kwok)}, nil},
		{"the first cluster with a local pool", clusters[1], []fkev1.NodePool{rangePool("team", "b", "cpu", local), rangePool("default", "a", "cpu", kwok)}, nil},
		{"a local pool beside another cluster's", clusters[1], []fkev1.NodePool{rangePool("team", "b", "cpu", local), rangePool("default", "a", "cpu", local)},
			[]string{"cluster team/b's pod range 10.112.0.0/16 overlaps pod range 10.112.0.0/14 of cluster default/a, which uses local nodes",
				"create the cluster with a pod range of its own (spec.network.podCIDR, `fke cluster create --pod-cidr`)"}},
		{"the other way round", a, []fkev1.NodePool{rangePool("team", "b", "cpu", local), rangePool("default", "a", "gpu", local)},
			[]string{"cluster default/a's pod range 10.112.0.0/14 overlaps pod range 10.112.0.0/16 of cluster team/b"}},
		{"two clusters named", a, []fkev1.NodePool{rangePool("team", "b", "cpu", local), rangePool("team", "f", "x", local), rangePool("default", "a", "gpu", local)},
			[]string{"10.112.0.0/16 of cluster team/b, which uses local nodes and pod range 10.113.0.0/16 of cluster team/f"}},
		{"a kwok pool beside local ones", clusters[1], []fkev1.NodePool{rangePool("team", "b", "cpu", kwok), rangePool("default", "a", "cpu", local)}, nil},
		{"the same cluster's other local pool", a, []fkev1.NodePool{rangePool("default", "a", "cpu", local), rangePool("default", "a", "gpu", local)}, nil},
		{"a pool of the same name in another namespace", a, []fkev1.NodePool{rangePool("default", "a", "cpu", local), rangePool("team", "a", "cpu", local)}, nil},
		{"disjoint ranges", clusters[2], []fkev1.NodePool{rangePool("default", "c", "cpu", local), rangePool("default", "a", "cpu", local)}, nil},
		{"the local node addresses", clusters[3], []fkev1.NodePool{rangePool("default", "d", "cpu", local)},
			[]string{"cluster default/d's pod range 172.16.0.0/12 overlaps 172.29.0.0/16, the addresses of local nodes on this host"}},
		{"range not chosen yet", clusters[4], []fkev1.NodePool{rangePool("default", "e", "cpu", local), rangePool("default", "a", "cpu", local)}, nil},
		{"another cluster whose range is not chosen yet", a, []fkev1.NodePool{rangePool("default", "e", "cpu", local), rangePool("default", "a", "cpu", local)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckLocalPodRange(&tt.cluster, clusters, tt.pools)
			if len(tt.want) == 0 {
				if got != "" {
					t.Fatalf("refused: %s", got)
				}
				return
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("got %q, want %q", got, w)
				}
			}
		})
	}
}

// TestWebhookRefusesOverlappingLocalPool sends admission requests through
// the handlers the webhook server serves.
func TestWebhookRefusesOverlappingLocalPool(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fkev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	a := rangeCluster("default", "a", "10.112.0.0/14")
	b := rangeCluster("default", "b", "10.112.0.0/16")
	c := rangeCluster("default", "c", "10.128.0.0/14")
	fresh := rangeCluster("default", "fresh", "")
	aLocal := rangePool("default", "a", "cpu", fkev1.ProviderLocal)
	freshLocal := rangePool("default", "fresh", "cpu", fkev1.ProviderLocal)
	it := &fkev1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "cpu-small"}}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&a, &b, &c, &fresh, &aLocal, &freshLocal, it).Build()
	v := New(scheme, reader, func() []fkev1.ProviderName { return []fkev1.ProviderName{fkev1.ProviderKwok, fkev1.ProviderLocal} })

	request := func(obj, old client.Object, kind string) ctrladmission.Request {
		raw := func(o client.Object) runtime.RawExtension {
			if o == nil {
				return runtime.RawExtension{}
			}
			o = o.DeepCopyObject().(client.Object)
			o.GetObjectKind().SetGroupVersionKind(fkev1.GroupVersion.WithKind(kind))
			data, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			return runtime.RawExtension{Raw: data}
		}
		op := admissionv1.Create
		if old != nil {
			op = admissionv1.Update
		}
		return ctrladmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "1", Operation: op, Namespace: obj.GetNamespace(), Name: obj.GetName(), Object: raw(obj), OldObject: raw(old),
		}}
	}
	withRange := func(cl fkev1.Cluster, podCIDR string) *fkev1.Cluster {
		cl.Spec.Network.PodCIDR = podCIDR
		return &cl
	}
	bLocal, bKwok, cLocal := rangePool("default", "b", "cpu", fkev1.ProviderLocal), rangePool("default", "b", "cpu", fkev1.ProviderKwok), rangePool("default", "c", "cpu", fkev1.ProviderLocal)
	tests := []struct {
		name    string
		handler ctrladmission.Handler
		req     ctrladmission.Request
		want    string // "" = allowed
	}{
		{"local pool on an overlapping cluster", v.NodePoolHandler(), request(&bLocal, nil, "NodePool"),
			"spec.provider: cluster default/b's pod range 10.112.0.0/16 overlaps pod range 10.112.0.0/14 of cluster default/a, which uses local nodes"},
		{"kwok pool on an overlapping cluster", v.NodePoolHandler(), request(&bKwok, nil, "NodePool"), ""},
		{"local pool on a disjoint cluster", v.NodePoolHandler(), request(&cLocal, nil, "NodePool"), ""},
		{"an overlapping range chosen for a cluster with a local pool", v.ClusterHandler(), request(withRange(fresh, "10.113.0.0/16"), &fresh, "Cluster"),
			"spec.network.podCIDR: cluster default/fresh's pod range 10.113.0.0/16 overlaps pod range 10.112.0.0/14 of cluster default/a"},
		{"a free range chosen for a cluster with a local pool", v.ClusterHandler(), request(withRange(fresh, "10.132.0.0/14"), &fresh, "Cluster"), ""},
		{"an overlapping range on a cluster without local pools", v.ClusterHandler(), request(withRange(b, "10.112.0.0/16"), withRange(b, ""), "Cluster"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := tt.handler.Handle(t.Context(), tt.req)
			if resp.Result != nil && resp.Result.Code >= 500 {
				t.Fatalf("errored: %s", resp.Result.Message)
			}
			switch {
			case tt.want == "" && !resp.Allowed:
				t.Fatalf("refused: %s", resp.Result.Message)
			case tt.want != "" && resp.Allowed:
				t.Fatalf("allowed, want %q", tt.want)
			case tt.want != "" && !strings.Contains(resp.Result.Message, tt.want):
				t.Fatalf("got %q, want %q", resp.Result.Message, tt.want)
			}
		})
	}
}
