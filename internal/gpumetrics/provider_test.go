package gpumetrics

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

type fakeScraped map[PodKey]Values

func (f fakeScraped) Pods() (map[PodKey]Values, time.Time) { return f, time.Unix(100, 0) }

func indexer(objs ...any) toolscache.Indexer {
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			panic(err)
		}
	}
	return idx
}

func controller(kind, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, Controller: ptr.To(true)}}
}

func gpuPod(name string, owner []metav1.OwnerReference, ready bool, gpus int64, ann map[string]string) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "infer"}, OwnerReferences: owner, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{resourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func testProvider(scraped Scraped, objs ...any) *Provider {
	var pods, nodes, rss, deps, stss []any
	for _, o := range objs {
		switch o.(type) {
		case *corev1.Pod:
			pods = append(pods, o)
		case *corev1.Node:
			nodes = append(nodes, o)
		case *appsv1.ReplicaSet:
			rss = append(rss, o)
		case *appsv1.Deployment:
			deps = append(deps, o)
		case *appsv1.StatefulSet:
			stss = append(stss, o)
		}
	}
	return &Provider{
		Listers: Listers{
			Pods: corelisters.NewPodLister(indexer(pods...)), Nodes: corelisters.NewNodeLister(indexer(nodes...)),
			ReplicaSets: appslisters.NewReplicaSetLister(indexer(rss...)), Deployments: appslisters.NewDeploymentLister(indexer(deps...)),
			StatefulSets: appslisters.NewStatefulSetLister(indexer(stss...)),
		},
		Scraped: scraped,
		Clock:   clocktesting.NewFakePassiveClock(time.Unix(200, 0)),
	}
}

func info(metric string) provider.CustomMetricInfo {
	return provider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: metric}
}

func TestProviderServesPodsByWorkloadLoad(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: map[string]string{labelGPUMemory: "24576"}}}
	load := func(v string) map[string]string { return map[string]string{fkev1.AnnotationSimulateGPULoad: v} }
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: "default", Annotations: load("4.5")}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "infer-1", Namespace: "default", OwnerReferences: controller("Deployment", "infer")}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", Annotations: load("0.5")}}
	plainRS := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: "default", Annotations: load("bad")}}
	byRS := controller("ReplicaSet", "infer-1")

	tests := []struct {
		name    string
		objs    []any
		scraped fakeScraped
		metric  string
		want    map[string]string // pod -> value; pods absent get no value
	}{
		{
			name:   "one pod takes the whole load (capped at 100%)",
			objs:   []any{node, deploy, rs, gpuPod("p0", byRS, true, 1, nil)},
			metric: GPUUtil, want: map[string]string{"p0": "100"},
		},
		{
			name: "4.5 GPUs over 8 ready pods",
			objs: []any{node, deploy, rs, gpuPod("p0", byRS, true, 1, nil), gpuPod("p1", byRS, true, 1, nil), gpuPod("p2", byRS, true, 1, nil),
				gpuPod("p3", byRS, true, 1, nil), gpuPod("p4", byRS, true, 1, nil), gpuPod("p5", byRS, true, 1, nil), gpuPod("p6", byRS, true, 1, nil),
				gpuPod("p7", byRS, true, 1, nil)},
			metric: GPUUtil,
			want:   map[string]string{"p0": "56250m", "p1": "56250m", "p2": "56250m", "p3": "56250m", "p4": "56250m", "p5": "56250m", "p6": "56250m", "p7": "56250m"},
		},
		{
			name:   "a pod not ready yet reports 0 and does not share the load",
			objs:   []any{node, deploy, rs, gpuPod("p0", byRS, true, 1, nil), gpuPod("p1", byRS, false, 1, nil)},
			metric: GPUUtil, want: map[string]string{"p0": "100", "p1": "0"},
		},
		{
			name:   "framebuffer from the node's GPU memory",
			objs:   []any{node, deploy, rs, gpuPod("p0", byRS, true, 1, nil)},
			metric: FBUsed, want: map[string]string{"p0": "24576"},
		},
		{
			name:    "what an agent reports wins over the simulation",
			objs:    []any{node, deploy, rs, gpuPod("p0", byRS, true, 1, nil), gpuPod("p1", byRS, true, 1, nil)},
			scraped: fakeScraped{{"default", "p0"}: {GPUUtil: 12.5}},
			metric:  GPUUtil, want: map[string]string{"p0": "12500m", "p1": "100"},
		},
		{
			name:   "StatefulSet and a lone pod's own annotation",
			objs:   []any{node, sts, gpuPod("db-0", controller("StatefulSet", "db"), true, 1, nil), gpuPod("solo", nil, true, 2, load("1"))},
			metric: GPUUtil, want: map[string]string{"db-0": "50", "solo": "50"},
		},
		{
			name:   "no annotation, a bad annotation, or no GPU: no metrics",
			objs:   []any{node, plainRS, gpuPod("x", nil, true, 1, nil), gpuPod("b", controller("ReplicaSet", "batch"), true, 1, nil), gpuPod("cpu", nil, true, 0, load("1"))},
			metric: GPUUtil, want: map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var scraped Scraped
			if tt.scraped != nil {
				scraped = tt.scraped
			}
			p := testProvider(scraped, tt.objs...)
			list, err := p.GetMetricBySelector(context.Background(), "default", labels.Everything(), info(tt.metric), labels.Everything())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, v := range list.Items {
				got[v.DescribedObject.Name] = v.Value.String()
				if v.DescribedObject.Kind != "Pod" || v.Metric.Name != tt.metric {
					t.Errorf("item %+v", v)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestProviderRefusesWhatItDoesNotServe(t *testing.T) {
	p := testProvider(nil)
	ctx := context.Background()
	for _, in := range []provider.CustomMetricInfo{
		info("requests_per_second"),
		{GroupResource: schema.GroupResource{Resource: "nodes"}, Metric: GPUUtil},
		{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: GPUUtil},
	} {
		_, err := p.GetMetricBySelector(ctx, "default", labels.Everything(), in, labels.Everything())
		if err == nil || !strings.Contains(err.Error(), GPUUtil+", "+MemCopyUtil) || !strings.Contains(err.Error(), in.Metric) {
			t.Errorf("%s: error %v does not name the metric and what is served", in, err)
		}
		_, err = p.GetMetricByName(ctx, types.NamespacedName{Namespace: "default", Name: "x"}, in, labels.Everything())
		if err == nil || !strings.Contains(err.Error(), "serves these metrics") {
			t.Errorf("%s by name: %v", in, err)
		}
	}
	if n := len(p.ListAllMetrics()); n != len(Metrics) {
		t.Errorf("lists %d metrics, want %d", n, len(Metrics))
	}
}

func TestProviderGetMetricByName(t *testing.T) {
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: "default", Annotations: map[string]string{fkev1.AnnotationSimulateGPULoad: "0.3"}}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "infer-1", Namespace: "default", OwnerReferences: controller("Deployment", "infer")}}
	p := testProvider(nil, deploy, rs, gpuPod("p0", controller("ReplicaSet", "infer-1"), true, 1, nil), gpuPod("idle", nil, true, 1, nil))
	v, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "default", Name: "p0"}, info(GPUUtil), labels.Everything())
	if err != nil || v.Value.String() != "30" {
		t.Fatalf("p0: %v, %v; want 30", v, err)
	}
	if _, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "default", Name: "idle"}, info(GPUUtil), labels.Everything()); err == nil {
		t.Error("a metric for a pod without load")
	}
}

// BenchmarkProvider1000Pods: the provider's own time for one HPA query of
// 1,000 simulated pods of one Deployment (no API server, no encoding).
//
//	go test ./internal/gpumetrics -run '^$' -bench Provider1000Pods
func BenchmarkProvider1000Pods(b *testing.B) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: map[string]string{labelGPUMemory: "81920"}}}
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: "default", Annotations: map[string]string{fkev1.AnnotationSimulateGPULoad: "600"}}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "infer-1", Namespace: "default", OwnerReferences: controller("Deployment", "infer")}}
	objs := []any{node, deploy, rs}
	for i := range 1000 {
		objs = append(objs, gpuPod(fmt.Sprintf("p%d", i), controller("ReplicaSet", "infer-1"), true, 1, nil))
	}
	p := testProvider(nil, objs...)
	sel := labels.SelectorFromSet(labels.Set{"app": "infer"})
	b.ResetTimer()
	for b.Loop() {
		list, err := p.GetMetricBySelector(context.Background(), "default", sel, info(GPUUtil), labels.Everything())
		if err != nil || len(list.Items) != 1000 || list.Items[0].Value.String() != "60" {
			b.Fatalf("%d items, %v", len(list.Items), err)
		}
	}
}
