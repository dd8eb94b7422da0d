package deploy

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func obj(apiVersion, kind, name string, conds ...map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name, "namespace": "default"}}}
	if len(conds) > 0 {
		var cs []any
		for _, c := range conds {
			cs = append(cs, c)
		}
		u.Object["status"] = map[string]any{"conditions": cs}
	}
	return u
}

func pod(name string, mut func(p *corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}}
	mut(&p)
	return p
}

func waiting(image, reason, msg string) func(p *corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", Image: image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	}
}

func unschedulable(msg string) func(p *corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}
	}
}

func podEvent(p, reason, msg string, at time.Time) corev1.Event {
	return corev1.Event{
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: p},
		Reason:         reason, Message: msg, LastTimestamp: metav1.NewTime(at),
	}
}

func TestDiagnose(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	deploy := obj("apps/v1", "Deployment", "web")
	tests := []struct {
		name   string
		obj    *unstructured.Unstructured
		pods   []corev1.Pod
		events []corev1.Event
		want   []string
	}{
		{name: "nothing wrong yet", obj: deploy, pods: []corev1.Pod{pod("web-1", waiting("web:1", "ContainerCreating", ""))}},
		{
			name: "image pull backoff, three replicas reported once",
			obj:  deploy,
			pods: []corev1.Pod{
				pod("web-1", waiting("registry.local/nope:1", "ImagePullBackOff", `Back-off pulling image "registry.local/nope:1"`)),
				pod("web-2", waiting("registry.local/nope:1", "ImagePullBackOff", `Back-off pulling image "registry.local/nope:1"`)),
				pod("web-3", waiting("registry.local/nope:1", "ImagePullBackOff", `Back-off pulling image "registry.local/nope:1"`)),
			},
			want: []string{`pod web-1 (and 2 more): image registry.local/nope:1 cannot be pulled (ImagePullBackOff): Back-off pulling image "registry.local/nope:1"`},
		},
		{
			name:   "pull error without a message takes the kubelet's event",
			obj:    deploy,
			pods:   []corev1.Pod{pod("web-1", waiting("nope:1", "ErrImagePull", ""))},
			events: []corev1.Event{podEvent("web-1", "Failed", "old", t0), podEvent("web-1", "Failed", "manifest unknown", t0.Add(time.Second)), podEvent("other", "Failed", "not this pod", t0.Add(time.Hour))},
			want:   []string{"pod web-1: image nope:1 cannot be pulled (ErrImagePull): manifest unknown"},
		},
		{
			name: "crash loop with the last exit",
			obj:  deploy,
			pods: []corev1.Pod{pod("web-1", func(p *corev1.Pod) {
				waiting("web:1", "CrashLoopBackOff", "back-off 10s")(p)
				p.Status.ContainerStatuses[0].RestartCount = 4
				p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: "config missing"}
			})},
			want: []string{"pod web-1: container web is crash-looping (restarts: 4; last exit code 3 Error: config missing)"},
		},
		{
			name: "running between two crashes",
			obj:  deploy,
			pods: []corev1.Pod{pod("web-1", func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", RestartCount: 2,
					State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}}}}
			})},
			want: []string{"pod web-1: container web is crash-looping (restarts: 2; last exit code 2 Error)"},
		},
		{
			name: "just crashed, before the back-off",
			obj:  deploy,
			pods: []corev1.Pod{pod("web-1", func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", RestartCount: 3,
					State:                corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}
			})},
			want: []string{"pod web-1: container web is crash-looping (restarts: 3; last exit code 2 Error)"},
		},
		{
			name: "exited cleanly under restartPolicy Always: no problem of its own",
			obj:  deploy,
			pods: []corev1.Pod{pod("web-1", func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web",
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}
			})},
		},
		{
			name:   "unschedulable with the autoscaler's reason",
			obj:    deploy,
			pods:   []corev1.Pod{pod("web-1", unschedulable("0/2 nodes are available: 2 Insufficient nvidia.com/gpu."))},
			events: []corev1.Event{podEvent("web-1", ReasonNotTriggerScaleUp, "pod didn't fit any node pool: 1 max size reached", t0)},
			want:   []string{"pod web-1: cannot be scheduled: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu.; node autoscaler: pod didn't fit any node pool: 1 max size reached"},
		},
		{
			name: "unschedulable, no autoscaler event",
			obj:  deploy,
			pods: []corev1.Pod{pod("web-1", unschedulable("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."))},
			want: []string{"pod web-1: cannot be scheduled: 0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."},
		},
		{
			name: "failed job and its pod",
			obj:  obj("batch/v1", "Job", "migrate", map[string]any{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}),
			pods: []corev1.Pod{pod("migrate-x", func(p *corev1.Pod) {
				p.Spec.RestartPolicy = corev1.RestartPolicyNever
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "migrate", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}
			})},
			want: []string{
				"job migrate failed: BackoffLimitExceeded: Job has reached the specified backoff limit",
				"pod migrate-x: container migrate failed (exit code 1: Error)",
			},
		},
		{
			name: "stalled rollout",
			obj:  obj("apps/v1", "Deployment", "web", map[string]any{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": `ReplicaSet "web-1" has timed out progressing.`}),
			want: []string{`rollout stalled: ReplicaSet "web-1" has timed out progressing.`},
		},
		{
			name: "other waiting reasons are shown as they are",
			obj:  deploy,
			pods: []corev1.Pod{pod("web-1", waiting("web:1", "CreateContainerConfigError", `secret "db" not found`))},
			want: []string{`pod web-1: container web is waiting: CreateContainerConfigError: secret "db" not found`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Diagnose(tt.obj, tt.pods, tt.events)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func TestDiff(t *testing.T) {
	live := obj("v1", "ConfigMap", "a")
	live.Object["data"] = map[string]any{"k": "1"}
	live.SetResourceVersion("5")
	live.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "fke"}})
	same := obj("v1", "ConfigMap", "a")
	same.Object["data"] = map[string]any{"k": "1"}
	same.SetResourceVersion("6")
	changed := obj("v1", "ConfigMap", "a")
	changed.Object["data"] = map[string]any{"k": "2"}

	if a, d := Diff(live, same); a != "unchanged" || d != "" {
		t.Errorf("same object: %s %q", a, d)
	}
	a, d := Diff(live, changed)
	if a != "changed" || !strings.Contains(d, "-  k: \"1\"") || !strings.Contains(d, "+  k: \"2\"") || strings.Contains(d, "resourceVersion") {
		t.Errorf("changed object: %s\n%s", a, d)
	}
	if a, d := Diff(nil, changed); a != "created" || !strings.Contains(d, "+kind: ConfigMap") {
		t.Errorf("new object: %s\n%s", a, d)
	}
}

func TestShortenInvalid(t *testing.T) {
	long := `Job.batch "migrate" is invalid: spec.template: Invalid value: {"labels":{"job-name":"migrate"},"Spec":{"Volumes":null,"InitContainers":null,"Containers":[{"Name":"migrate"}]}}: field is immutable`
	if got, want := shortenInvalid(long), `Job.batch "migrate" is invalid: spec.template: field is immutable`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	short := `Service "web" is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535`
	if got := shortenInvalid(short); got != short {
		t.Errorf("a short message changed: %q", got)
	}
}

func TestNewParent(t *testing.T) {
	crd := obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.dev")
	crd.Object["spec"] = map[string]any{"group": "example.dev", "names": map[string]any{"kind": "Widget"}}
	cm := obj("v1", "ConfigMap", "a")
	cm.SetNamespace("fresh")
	objs := []*unstructured.Unstructured{crd, cm}
	tests := []struct {
		err  string
		want bool
	}{
		{`namespaces "fresh" not found`, true},
		{`namespaces "other" not found`, false},
		{`no matches for kind "Widget" in version "example.dev/v1"`, true},
		{`no matches for kind "Gadget" in version "example.dev/v1"`, false},
		{`admission webhook denied the request`, false},
	}
	for _, tt := range tests {
		if got := newParent(errors.New(tt.err), objs); got != tt.want {
			t.Errorf("newParent(%q) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
