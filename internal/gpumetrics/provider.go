package gpumetrics

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"k8s.io/utils/clock"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// Resource names the adapter reads from pods and nodes.
const (
	resourceGPU = corev1.ResourceName("nvidia.com/gpu")
	// labelGPUMemory is GPU Feature Discovery's label of a node's GPU
	// memory in MiB (fke's agent and kwok nodes set it).
	labelGPUMemory = "nvidia.com/gpu.memory"
)

var podsResource = schema.GroupResource{Resource: "pods"}

// Listers are the caches the provider reads (from shared informers).
type Listers struct {
	Pods         corelisters.PodLister
	Nodes        corelisters.NodeLister
	ReplicaSets  appslisters.ReplicaSetLister
	Deployments  appslisters.DeploymentLister
	StatefulSets appslisters.StatefulSetLister
}

// Scraped is the latest scrape of the GPU agents.
type Scraped interface {
	// Pods returns the metrics of the pods the agents report and when they
	// were read. Safe for concurrent use.
	Pods() (map[PodKey]Values, time.Time)
}

// Provider serves the metrics of pods on the custom metrics API
// (provider.CustomMetricsProvider): a pod's values are those its GPU
// agent reports (Scraped) or, when none does, the simulation's for pods
// whose workload is annotated fke.dev/simulate-gpu-load.
type Provider struct {
	Listers Listers
	// Scraped may be nil (simulation only).
	Scraped Scraped
	Clock   clock.PassiveClock
}

var _ provider.CustomMetricsProvider = (*Provider)(nil)

// ListAllMetrics implements provider.CustomMetricsProvider: every served
// metric, for pods.
func (p *Provider) ListAllMetrics() []provider.CustomMetricInfo {
	out := make([]provider.CustomMetricInfo, len(Metrics))
	for i, m := range Metrics {
		out[i] = provider.CustomMetricInfo{GroupResource: podsResource, Namespaced: true, Metric: m.Name}
	}
	return out
}

// notServed is the error for a metric or resource the adapter does not
// serve; its message (which HPAs show in their FailedGetPodsMetric
// condition) names what is served.
func notServed(info provider.CustomMetricInfo) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("fke's GPU metrics adapter does not serve %s for %s: it serves these metrics for pods: %s",
			info.Metric, info.GroupResource.String(), strings.Join(Names(), ", ")),
	}}
}

func (p *Provider) check(info provider.CustomMetricInfo) error {
	if _, ok := Lookup(info.Metric); !ok || info.GroupResource != podsResource || !info.Namespaced {
		return notServed(info)
	}
	return nil
}

// GetMetricByName implements provider.CustomMetricsProvider.
func (p *Provider) GetMetricByName(_ context.Context, name types.NamespacedName, info provider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValue, error) {
	if err := p.check(info); err != nil {
		return nil, err
	}
	pod, err := p.Listers.Pods.Pods(name.Namespace).Get(name.Name)
	if err != nil {
		return nil, err
	}
	list, err := p.values(name.Namespace, []*corev1.Pod{pod}, info.Metric)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, provider.NewMetricNotFoundForError(podsResource, info.Metric, name.Name)
	}
	return &list[0], nil
}

// GetMetricBySelector implements provider.CustomMetricsProvider: the
// metric of every pod of namespace matching selector that has it.
func (p *Provider) GetMetricBySelector(_ context.Context, namespace string, selector labels.Selector, info provider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValueList, error) {
	if err := p.check(info); err != nil {
		return nil, err
	}
	pods, err := p.Listers.Pods.Pods(namespace).List(selector)
	if err != nil {
		return nil, err
	}
	items, err := p.values(namespace, pods, info.Metric)
	if err != nil {
		return nil, err
	}
	return &custom_metrics.MetricValueList{Items: items}, nil
}

// values returns metric of each of pods (all in namespace) that has it.
func (p *Provider) values(namespace string, pods []*corev1.Pod, metric string) ([]custom_metrics.MetricValue, error) {
	var scraped map[PodKey]Values
	var scrapedAt time.Time
	if p.Scraped != nil {
		scraped, scrapedAt = p.Scraped.Pods()
	}
	simulated, err := p.simulate(namespace, scraped)
	if err != nil {
		return nil, err
	}
	now := p.Clock.Now()
	var out []custom_metrics.MetricValue
	for _, pod := range pods {
		k := PodKey{pod.Namespace, pod.Name}
		vals, at := scraped[k], scrapedAt
		if vals == nil {
			vals, at = simulated[k], now
		}
		v, ok := vals[metric]
		if !ok {
			continue
		}
		out = append(out, custom_metrics.MetricValue{
			DescribedObject: custom_metrics.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name},
			Metric:          custom_metrics.MetricIdentifier{Name: metric},
			Timestamp:       metav1.NewTime(at),
			Value:           *resource.NewMilliQuantity(int64(v*1000+0.5), resource.DecimalSI),
		})
	}
	return out, nil
}

// simulate runs the simulation over every pod of namespace whose workload
// carries a load, except those the agents report.
func (p *Provider) simulate(namespace string, scraped map[PodKey]Values) (map[PodKey]Values, error) {
	all, err := p.Listers.Pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	memory := map[string]int64{}
	var sim []SimPod
	for _, pod := range all {
		k := PodKey{pod.Namespace, pod.Name}
		if _, ok := scraped[k]; ok || pod.Spec.NodeName == "" {
			continue
		}
		workload, load, ok := p.load(pod)
		if !ok {
			continue
		}
		mem, seen := memory[pod.Spec.NodeName]
		if !seen {
			mem = p.gpuMemory(pod.Spec.NodeName)
			memory[pod.Spec.NodeName] = mem
		}
		sim = append(sim, SimPod{Key: k, Workload: workload, Load: load, Ready: podReady(pod), GPUs: podGPUs(pod), GPUMemoryMiB: mem})
	}
	return Simulate(sim), nil
}

// load finds the offered load of pod's workload: the annotation on the
// pod itself, else on its Deployment (through its ReplicaSet), its
// ReplicaSet or its StatefulSet. Values that do not parse count as none.
func (p *Provider) load(pod *corev1.Pod) (workload string, load float64, ok bool) {
	if v, found := pod.Annotations[fkev1.AnnotationSimulateGPULoad]; found {
		return parsed("Pod/"+pod.Namespace+"/"+pod.Name, v)
	}
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil {
		return "", 0, false
	}
	switch ref.Kind {
	case "ReplicaSet":
		rs, err := p.Listers.ReplicaSets.ReplicaSets(pod.Namespace).Get(ref.Name)
		if err != nil {
			return "", 0, false
		}
		if d := metav1.GetControllerOfNoCopy(rs); d != nil && d.Kind == "Deployment" {
			if dep, err := p.Listers.Deployments.Deployments(pod.Namespace).Get(d.Name); err == nil {
				if v, found := dep.Annotations[fkev1.AnnotationSimulateGPULoad]; found {
					return parsed("Deployment/"+dep.Namespace+"/"+dep.Name, v)
				}
			}
		}
		if v, found := rs.Annotations[fkev1.AnnotationSimulateGPULoad]; found {
			return parsed("ReplicaSet/"+rs.Namespace+"/"+rs.Name, v)
		}
	case "StatefulSet":
		sts, err := p.Listers.StatefulSets.StatefulSets(pod.Namespace).Get(ref.Name)
		if err != nil {
			return "", 0, false
		}
		if v, found := sts.Annotations[fkev1.AnnotationSimulateGPULoad]; found {
			return parsed("StatefulSet/"+sts.Namespace+"/"+sts.Name, v)
		}
	}
	return "", 0, false
}

func parsed(workload, v string) (string, float64, bool) {
	load, err := ParseLoad(v)
	if err != nil {
		return "", 0, false
	}
	return workload, load, true
}

// gpuMemory is the memory of one GPU of node, in MiB (0: unknown).
func (p *Provider) gpuMemory(node string) int64 {
	n, err := p.Listers.Nodes.Get(node)
	if err != nil {
		return 0
	}
	mem, err := strconv.ParseInt(n.Labels[labelGPUMemory], 10, 64)
	if err != nil || mem < 0 {
		return 0
	}
	return mem
}

// podReady: Ready and not terminating.
func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podGPUs is the number of GPUs pod's containers ask for (limits, which
// equal requests for extended resources).
func podGPUs(pod *corev1.Pod) int {
	n := int64(0)
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[resourceGPU]
		if !ok {
			q = c.Resources.Requests[resourceGPU]
		}
		n += q.Value()
	}
	return int(n)
}
