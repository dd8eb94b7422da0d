package provreq

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fke.dev/fke/internal/autoscaler/decide"
	provreqv1 "fke.dev/fke/internal/autoscaler/provreq/v1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func gpuNode(name string, gpus int64) *corev1.Node {
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("96"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("110"),
		"nvidia.com/gpu":      *resource.NewQuantity(gpus, resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
		Status:     corev1.NodeStatus{Capacity: alloc, Allocatable: alloc},
	}
}

func pool(name string, gpus int64, current, upcoming, maxSize int, price float64) decide.Pool {
	return decide.Pool{Name: name, Template: gpuNode("template-"+name, gpus), MaxSize: maxSize, Current: current, Upcoming: upcoming, PricePerHour: price}
}

func gpuPods(n int, gpus int64) []*corev1.Pod {
	tmpl := &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "worker"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "w", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)},
			}}},
		}},
	}
	pods, err := PodsFor(request("x", "", int32(n)), map[string]*corev1.PodTemplate{"worker": tmpl})
	if err != nil {
		panic(err)
	}
	return pods
}

func request(name, class string, count int32, conds ...metav1.Condition) *provreqv1.ProvisioningRequest {
	return &provreqv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(t0.Add(-time.Minute))},
		Spec: provreqv1.ProvisioningRequestSpec{
			ProvisioningClassName: class,
			PodSets:               []provreqv1.PodSet{{PodTemplateRef: provreqv1.Reference{Name: "worker"}, Count: count}},
		},
		Status: provreqv1.ProvisioningRequestStatus{Conditions: conds},
	}
}

func booked(pr *provreqv1.ProvisioningRequest, b Booking) *provreqv1.ProvisioningRequest {
	pr.Annotations = map[string]string{AnnotationBooking: b.String()}
	return pr
}

func condition(typ string, status metav1.ConditionStatus, reason string, at time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(at)}
}

func readyNodes(n int, gpus int64) []decide.NodeInfo {
	var out []decide.NodeInfo
	for i := range n {
		out = append(out, decide.NodeInfo{Node: gpuNode(fmt.Sprintf("gpu-%d", i), gpus), Pool: "gpu", Ready: true})
	}
	return out
}

// summary renders a decision compactly: conditions, booking, resize.
func summary(d Decision) string {
	var parts []string
	for _, c := range d.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	if b := d.Booking; b != nil {
		parts = append(parts, fmt.Sprintf("book %s+%d (%d→%d)", b.Pool, b.Nodes, b.From, b.To))
	}
	if r := d.Resize; r != nil {
		parts = append(parts, fmt.Sprintf("resize %s %d→%d", r.Pool, r.From, r.To))
	}
	return strings.Join(parts, " ")
}

func TestDecide(t *testing.T) {
	const (
		atomic = provreqv1.ClassBestEffortAtomicScaleUp
		check  = provreqv1.ClassCheckCapacity
	)
	accepted := condition(provreqv1.Accepted, metav1.ConditionTrue, ReasonAccepted, t0.Add(-time.Minute))
	gpu := func(current, upcoming, maxSize int) []decide.Pool {
		return []decide.Pool{pool("gpu", 8, current, upcoming, maxSize, 98)}
	}
	tests := []struct {
		name      string
		pr        *provreqv1.ProvisioningRequest
		pods      []*corev1.Pod
		podsError string
		nodes     []decide.NodeInfo
		pools     []decide.Pool
		replicas  map[string]int
		want      string
		message   string // substring of the last condition's message
	}{
		{name: "unknown class fails", pr: request("r", "queued-provisioning.gke.io", 1), pods: gpuPods(1, 8), pools: gpu(0, 0, 3),
			want: "Accepted=False/ClassNotSupported Failed=True/ClassNotSupported", message: `"queued-provisioning.gke.io" is not supported`},
		{name: "check-capacity: fits ready nodes", pr: request("r", check, 1), pods: gpuPods(1, 8), nodes: readyNodes(2, 8), pools: gpu(2, 0, 3), replicas: map[string]int{"gpu": 2},
			want: "Accepted=True/Accepted Provisioned=True/CapacityIsFound"},
		{name: "check-capacity: does not fit, never scales", pr: request("r", check, 3), pods: gpuPods(3, 8), nodes: readyNodes(2, 8), pools: gpu(2, 0, 3), replicas: map[string]int{"gpu": 2},
			want: "Accepted=True/Accepted Provisioned=False/CapacityIsNotFound", message: "Insufficient nvidia.com/gpu"},
		{name: "check-capacity: not-ready nodes are no capacity", pr: request("r", check, 1), pods: gpuPods(1, 8),
			nodes: []decide.NodeInfo{{Node: gpuNode("n", 8), Pool: "gpu"}}, pools: gpu(0, 1, 3), replicas: map[string]int{"gpu": 1},
			want: "Accepted=True/Accepted Provisioned=False/CapacityIsNotFound", message: "not ready"},
		{name: "atomic: over max size fails, grows nothing", pr: request("r", atomic, 4), pods: gpuPods(4, 8), pools: gpu(0, 0, 3), replicas: map[string]int{"gpu": 0},
			want: "Accepted=True/Accepted Failed=True/CapacityIsNotFound", message: "max size of pool gpu reached: need 4, 3 allowed"},
		{name: "atomic: room taken by current nodes is tried again", pr: request("r", atomic, 2), pods: gpuPods(2, 8), pools: gpu(2, 0, 3), replicas: map[string]int{"gpu": 2},
			want: "Accepted=True/Accepted Provisioned=False/CapacityIsNotFound", message: "fke will try again: max size of pool gpu reached: need 2, 1 allowed"},
		{name: "atomic: noRetry fails at once", pr: func() *provreqv1.ProvisioningRequest {
			pr := request("r", atomic, 2)
			pr.Spec.Parameters = map[string]provreqv1.Parameter{ParameterNoRetry: "true"}
			return pr
		}(), pods: gpuPods(2, 8), pools: gpu(2, 0, 3), replicas: map[string]int{"gpu": 2},
			want: "Accepted=True/Accepted Failed=True/CapacityIsNotFound", message: "need 2, 1 allowed"},
		{name: "atomic: backing-off pool is tried again", pr: request("r", atomic, 1), pods: gpuPods(1, 8), pools: func() []decide.Pool {
			p := gpu(0, 0, 3)
			p[0].BackoffUntil = t0.Add(time.Minute)
			return p
		}(), replicas: map[string]int{"gpu": 0},
			want: "Accepted=True/Accepted Provisioned=False/CapacityIsNotFound", message: "backing off"},
		{name: "atomic: pod too big for any pool fails", pr: request("r", atomic, 1), pods: gpuPods(1, 16), pools: gpu(0, 0, 3), replicas: map[string]int{"gpu": 0},
			want: "Accepted=True/Accepted Failed=True/CapacityIsNotFound", message: "Insufficient nvidia.com/gpu"},
		{name: "atomic: no autoscaled pool", pr: request("r", atomic, 1), pods: gpuPods(1, 8),
			want: "Accepted=True/Accepted Failed=True/CapacityIsNotFound", message: "no autoscaled node pool"},
		{name: "atomic: grows the pool by all nodes at once", pr: request("r", atomic, 2), pods: gpuPods(2, 8), pools: gpu(0, 0, 3), replicas: map[string]int{"gpu": 0},
			want: "Accepted=True/Accepted Provisioned=False/Provisioning book gpu+2 (0→2) resize gpu 0→2", message: "growing by 2 nodes (0 → 2)"},
		{name: "atomic: existing capacity first", pr: request("r", atomic, 2), pods: gpuPods(2, 8), nodes: readyNodes(2, 8), pools: gpu(2, 0, 3), replicas: map[string]int{"gpu": 2},
			want: "Accepted=True/Accepted Provisioned=True/CapacityIsFound"},
		{name: "atomic: fewest nodes wins", pr: request("r", atomic, 4), pods: gpuPods(4, 4),
			pools:    []decide.Pool{pool("a-x4", 4, 0, 0, 10, 10), pool("b-x8", 8, 0, 0, 10, 98)},
			replicas: map[string]int{"a-x4": 0, "b-x8": 0},
			want:     "Accepted=True/Accepted Provisioned=False/Provisioning book b-x8+2 (0→2) resize b-x8 0→2"},
		{name: "atomic: same nodes, cheaper wins", pr: request("r", atomic, 2), pods: gpuPods(2, 8),
			pools:    []decide.Pool{pool("a", 8, 0, 0, 10, 120), pool("b", 8, 0, 0, 10, 98), pool("c", 8, 0, 0, 10, 0)},
			replicas: map[string]int{"a": 0, "b": 0, "c": 0},
			want:     "Accepted=True/Accepted Provisioned=False/Provisioning book b+2 (0→2) resize b 0→2"},
		{name: "atomic: skips a full pool", pr: request("r", atomic, 2), pods: gpuPods(2, 8),
			pools:    []decide.Pool{pool("a", 8, 3, 0, 3, 10), pool("b", 8, 0, 0, 3, 98)},
			replicas: map[string]int{"a": 3, "b": 0},
			want:     "Accepted=True/Accepted Provisioned=False/Provisioning book b+2 (0→2) resize b 0→2"},
		{name: "atomic booked: waiting, never grows twice",
			pr:   booked(request("r", atomic, 2, accepted, condition(provreqv1.Provisioned, metav1.ConditionFalse, ReasonProvisioning, t0)), Booking{Pool: "gpu", Nodes: 2, From: 0, To: 2, Time: metav1.NewTime(t0)}),
			pods: gpuPods(2, 8), nodes: []decide.NodeInfo{{Node: gpuNode("n", 8), Pool: "gpu"}}, pools: gpu(0, 2, 3), replicas: map[string]int{"gpu": 2},
			want: "Provisioned=False/Provisioning"},
		{name: "atomic booked: restart before the resize grows to the booked size",
			pr:   booked(request("r", atomic, 2, accepted), Booking{Pool: "gpu", Nodes: 2, From: 0, To: 2, Time: metav1.NewTime(t0)}),
			pods: gpuPods(2, 8), pools: gpu(0, 0, 3), replicas: map[string]int{"gpu": 0},
			want: "Provisioned=False/Provisioning resize gpu 0→2"},
		{name: "atomic booked: machines ready",
			pr:   booked(request("r", atomic, 2, accepted), Booking{Pool: "gpu", Nodes: 2, From: 0, To: 2, Time: metav1.NewTime(t0)}),
			pods: gpuPods(2, 8), nodes: readyNodes(2, 8), pools: gpu(2, 0, 3), replicas: map[string]int{"gpu": 2},
			want: "Provisioned=True/CapacityIsProvisioned"},
		{name: "atomic booked: machines never came",
			pr:   booked(request("r", atomic, 2, accepted), Booking{Pool: "gpu", Nodes: 2, From: 0, To: 2, Time: metav1.NewTime(t0.Add(-MaxProvisionTime - time.Second))}),
			pods: gpuPods(2, 8), pools: gpu(0, 2, 3), replicas: map[string]int{"gpu": 2},
			want: "Failed=True/ProvisioningTimedOut"},
		{name: "atomic booked: pool gone",
			pr:   booked(request("r", atomic, 2, accepted), Booking{Pool: "old", Nodes: 2, From: 0, To: 2, Time: metav1.NewTime(t0)}),
			pods: gpuPods(2, 8), pools: gpu(0, 0, 3), replicas: map[string]int{"gpu": 0},
			want: "Failed=True/CapacityIsNotFound"},
		{name: "provisioned: booking held", pr: request("r", atomic, 2, accepted, condition(provreqv1.Provisioned, metav1.ConditionTrue, ReasonCapacityIsProvisioned, t0.Add(-time.Minute))),
			pods: gpuPods(2, 8), want: ""},
		{name: "provisioned: booking expires", pr: request("r", check, 2, accepted, condition(provreqv1.Provisioned, metav1.ConditionTrue, ReasonCapacityIsFound, t0.Add(-BookingTime))),
			pods: gpuPods(2, 8), want: "BookingExpired=True/CapacityReservationTimeExpired"},
		{name: "final: nothing to do", pr: request("r", atomic, 4, condition(provreqv1.Failed, metav1.ConditionTrue, ReasonCapacityIsNotFound, t0)),
			pods: gpuPods(4, 8), pools: gpu(0, 0, 10), replicas: map[string]int{"gpu": 0}, want: ""},
		{name: "missing template: waits a little", pr: func() *provreqv1.ProvisioningRequest {
			pr := request("r", atomic, 1)
			pr.CreationTimestamp = metav1.NewTime(t0.Add(-10 * time.Second))
			return pr
		}(), podsError: "PodTemplate ml/worker not found", pools: gpu(0, 0, 3),
			want: "Accepted=True/Accepted Provisioned=False/FailedToCreatePods"},
		{name: "missing template: then fails", pr: func() *provreqv1.ProvisioningRequest {
			pr := request("r", atomic, 1, accepted)
			pr.CreationTimestamp = metav1.NewTime(t0.Add(-TemplateGracePeriod))
			return pr
		}(), podsError: "PodTemplate ml/worker not found", pools: gpu(0, 0, 3),
			want: "Failed=True/FailedToCreatePods"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(Input{Request: tt.pr, Pods: tt.pods, PodsError: tt.podsError, Snapshot: decide.Snapshot{Nodes: tt.nodes},
				Pools: tt.pools, Replicas: tt.replicas, Now: t0})
			if got := summary(d); got != tt.want {
				t.Fatalf("decision = %q, want %q", got, tt.want)
			}
			if tt.message != "" {
				if last := d.Conditions[len(d.Conditions)-1]; !strings.Contains(last.Message, tt.message) {
					t.Fatalf("message %q does not contain %q", last.Message, tt.message)
				}
			}
			if d.Resize != nil && d.Resize.To > d.Resize.From+len(tt.pods) {
				t.Fatalf("resize beyond what the pods need: %+v", d.Resize)
			}
			for _, c := range d.Conditions {
				if c.ObservedGeneration != tt.pr.Generation {
					t.Fatalf("condition %s observedGeneration %d", c.Type, c.ObservedGeneration)
				}
			}
		})
	}
}

// TestDecideIdempotent plays a request through its life: applying each
// decision as the controller does never books or grows twice.
func TestDecideIdempotent(t *testing.T) {
	pr := request("r", provreqv1.ClassBestEffortAtomicScaleUp, 2)
	pods := gpuPods(2, 8)
	replicas := map[string]int{"gpu": 0}
	apply := func(d Decision, now time.Time) {
		if d.Booking != nil {
			pr.Annotations = map[string]string{AnnotationBooking: d.Booking.String()}
		}
		if d.Resize != nil {
			replicas[d.Resize.Pool] = d.Resize.To
		}
		for _, c := range d.Conditions {
			meta.SetStatusCondition(&pr.Status.Conditions, c)
		}
	}
	grows := 0
	for i := range 5 { // machines not ready yet
		d := Decide(Input{Request: pr, Pods: pods, Pools: []decide.Pool{pool("gpu", 8, 0, replicas["gpu"], 3, 98)}, Replicas: replicas, Now: t0.Add(time.Duration(i) * time.Second)})
		if d.Booking != nil {
			grows++
		}
		apply(d, t0)
	}
	if grows != 1 || replicas["gpu"] != 2 {
		t.Fatalf("booked %d times, replicas %d; want once, 2", grows, replicas["gpu"])
	}
	d := Decide(Input{Request: pr, Pods: pods, Snapshot: decide.Snapshot{Nodes: readyNodes(2, 8)}, Pools: []decide.Pool{pool("gpu", 8, 2, 0, 3, 98)}, Replicas: replicas, Now: t0.Add(time.Minute)})
	apply(d, t0)
	if !meta.IsStatusConditionTrue(pr.Status.Conditions, provreqv1.Provisioned) {
		t.Fatalf("not provisioned: %+v", pr.Status.Conditions)
	}
}

func TestPodsFor(t *testing.T) {
	pr := request("job", provreqv1.ClassBestEffortAtomicScaleUp, 2)
	pr.Spec.PodSets = append(pr.Spec.PodSets, provreqv1.PodSet{PodTemplateRef: provreqv1.Reference{Name: "driver"}, Count: 1})
	tmpl := func(name string) *corev1.PodTemplate {
		return &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"role": name}}}}
	}
	pods, err := PodsFor(pr, map[string]*corev1.PodTemplate{"worker": tmpl("worker"), "driver": tmpl("driver")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pods {
		got = append(got, p.Namespace+"/"+p.Name+":"+p.Labels["role"])
	}
	if want := "ml/job-0-0:worker ml/job-0-1:worker ml/job-1-0:driver"; strings.Join(got, " ") != want {
		t.Fatalf("pods = %v, want %s", got, want)
	}
	if _, err := PodsFor(pr, map[string]*corev1.PodTemplate{"worker": tmpl("worker")}); err == nil || !strings.Contains(err.Error(), "ml/driver") {
		t.Fatalf("missing template: err = %v", err)
	}
}

func TestBooked(t *testing.T) {
	provisionedAt := condition(provreqv1.Provisioned, metav1.ConditionTrue, ReasonCapacityIsProvisioned, t0)
	tmpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "worker"}}
	template := func(ns, name string) *corev1.PodTemplate {
		if ns == "ml" && name == "worker" {
			return tmpl
		}
		return nil
	}
	consumer := func(req string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "c", Annotations: map[string]string{provreqv1.AnnotationConsumeProvisioningRequest: req}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	missing := request("missing", provreqv1.ClassBestEffortAtomicScaleUp, 2, provisionedAt)
	missing.Spec.PodSets[0].PodTemplateRef.Name = "gone"
	tests := []struct {
		name string
		prs  []*provreqv1.ProvisioningRequest
		pods []*corev1.Pod
		want string
	}{
		{"provisioned: all its pods are booked", []*provreqv1.ProvisioningRequest{request("a", provreqv1.ClassBestEffortAtomicScaleUp, 3, provisionedAt)}, nil, "a-0-0 a-0-1 a-0-2"},
		{"pods that consume it use up the booking", []*provreqv1.ProvisioningRequest{request("a", provreqv1.ClassBestEffortAtomicScaleUp, 3, provisionedAt)},
			[]*corev1.Pod{consumer("a", corev1.PodRunning), consumer("a", corev1.PodPending), consumer("a", corev1.PodSucceeded), consumer("other", corev1.PodRunning)}, "a-0-2"},
		{"not provisioned yet: nothing booked", []*provreqv1.ProvisioningRequest{request("a", provreqv1.ClassBestEffortAtomicScaleUp, 3)}, nil, ""},
		{"booking expired: nothing booked", []*provreqv1.ProvisioningRequest{request("a", provreqv1.ClassCheckCapacity, 3, provisionedAt,
			condition(provreqv1.BookingExpired, metav1.ConditionTrue, ReasonCapacityReservationTimeExpired, t0))}, nil, ""},
		{"template gone: nothing booked", []*provreqv1.ProvisioningRequest{missing}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range Booked(tt.prs, template, tt.pods) {
				got = append(got, p.Name)
				if p.Annotations[provreqv1.AnnotationConsumeProvisioningRequest] == "" {
					t.Errorf("booked pod %s does not name its request", p.Name)
				}
			}
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("booked %v, want %q", got, tt.want)
			}
		})
	}
}
