package deploy

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	pollevent "sigs.k8s.io/cli-utils/pkg/kstatus/polling/event"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/cli-utils/pkg/kstatus/watcher"
	"sigs.k8s.io/cli-utils/pkg/object"
)

func TestPullIsFinal(t *testing.T) {
	tests := []struct {
		reason, message string
		want            bool
	}{
		// What containerd and registries say of an image that is not there.
		{"ErrImagePull", `failed to pull and unpack image "127.0.0.1:5000/fke/nope:1": failed to resolve reference "127.0.0.1:5000/fke/nope:1": 127.0.0.1:5000/fke/nope:1: not found`, true},
		{"ImagePullBackOff", `Back-off pulling image "reg/app:2": ErrImagePull: reg/app:2: not found`, true},
		{"ErrImagePull", `rpc error: code = NotFound desc = failed to pull and unpack image "r/a:1": manifest unknown: manifest unknown`, true},
		{"ErrImagePull", `failed to resolve reference "r/a:1": name unknown: repository name not known to registry`, true},
		{"InvalidImageName", `Failed to apply default image tag "UPPER:1": couldn't parse image name`, true},
		{"ErrImageNeverPull", `Container image "app:1" is not present with pull policy of Never`, true},
		// Not final: the registry may answer, the credentials or the rate may change.
		{"ErrImagePull", `failed to do request: Head "https://reg/v2/a/manifests/1": dial tcp 10.0.0.1:443: connect: connection refused`, false},
		{"ErrImagePull", `dial tcp: lookup reg.example on 10.96.0.10:53: no such host`, false},
		{"ErrImagePull", `failed to resolve reference: unexpected status from HEAD request: 401 Unauthorized`, false},
		{"ErrImagePull", `pull access denied, repository does not exist or may require authorization`, false},
		{"ErrImagePull", `toomanyrequests: You have reached your pull rate limit`, false},
		{"ErrImagePull", `net/http: TLS handshake timeout`, false},
		{"ImagePullBackOff", `Back-off pulling image "reg/app:2"`, false},
		{"RegistryUnavailable", `registry not found`, false},
		{"CrashLoopBackOff", `not found`, false},
	}
	for _, tt := range tests {
		if got := PullIsFinal(tt.reason, tt.message); got != tt.want {
			t.Errorf("PullIsFinal(%s, %q) = %v, want %v", tt.reason, tt.message, got, tt.want)
		}
	}
}

func TestAssessFinal(t *testing.T) {
	deploy := obj("apps/v1", "Deployment", "web")
	missing := `Back-off pulling image "r/web:9": ErrImagePull: r/web:9: not found`
	tests := []struct {
		name   string
		obj    *unstructured.Unstructured
		pods   []corev1.Pod
		events []corev1.Event
		want   []string // "final key" or "wait key" per problem
	}{
		{name: "missing image, two replicas", obj: deploy,
			pods: []corev1.Pod{pod("web-1", waiting("r/web:9", "ImagePullBackOff", missing)), pod("web-2", waiting("r/web:9", "ImagePullBackOff", missing))},
			want: []string{"final image-pull web r/web:9"}},
		{name: "back-off without the cause takes the kubelet's Failed event", obj: deploy,
			pods:   []corev1.Pod{pod("web-1", waiting("r/web:9", "ImagePullBackOff", `Back-off pulling image "r/web:9"`))},
			events: []corev1.Event{podEvent("web-1", "Failed", `Failed to pull image "r/web:9": manifest unknown`, time.Unix(1, 0))},
			want:   []string{"final image-pull web r/web:9"}},
		{name: "registry down", obj: deploy,
			pods: []corev1.Pod{pod("web-1", waiting("r/web:9", "ErrImagePull", "dial tcp 10.0.0.1:5000: connect: connection refused"))},
			want: []string{"wait image-pull web r/web:9"}},
		{name: "crash loop and unschedulable pods wait", obj: deploy,
			pods: []corev1.Pod{pod("web-1", waiting("r/web:9", "CrashLoopBackOff", "back-off")), pod("web-2", unschedulable("0/1 nodes are available"))},
			want: []string{"wait crash-loop web", "wait unschedulable"}},
		{name: "a failed Job is final", obj: obj("batch/v1", "Job", "migrate", map[string]any{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}),
			want: []string{"final job-failed"}},
		{name: "a stalled rollout may still progress", obj: obj("apps/v1", "Deployment", "web", map[string]any{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}),
			want: []string{"wait rollout-stalled"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range Assess(tt.obj, tt.pods, tt.events) {
				w := "wait "
				if p.Final {
					w = "final "
				}
				got = append(got, w+p.Key)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %q, want %q", got, tt.want)
				}
			}
		})
	}
}

func TestFinalTracker(t *testing.T) {
	final := Problem{Text: "pod web-1: image r/web:9 cannot be pulled (ErrImagePull): not found", Final: true, Key: "image-pull web r/web:9"}
	backoff := Problem{Text: "pod web-1 (and 1 more): image r/web:9 cannot be pulled (ImagePullBackOff): not found", Final: true, Key: "image-pull web r/web:9"}
	crash := Problem{Text: "pod web-1: container web is crash-looping", Key: "crash-loop web"}
	tests := []struct {
		name   string
		checks [][]Problem // one check of Deployment web each
		other  []Problem   // a check of another object before the last one
		want   int         // final problems returned by the last check
	}{
		{name: "seen once", checks: [][]Problem{{final}}, want: 0},
		{name: "seen twice, the wording changed between", checks: [][]Problem{{final}, {backoff}}, want: 1},
		{name: "seen twice with a check between that did not see it", checks: [][]Problem{{final}, {}, {final}}, want: 1},
		{name: "a crash loop is never final", checks: [][]Problem{{crash}, {crash}, {crash}}, want: 0},
		{name: "another object's sighting does not count", checks: [][]Problem{{final}}, other: []Problem{final}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f finalTracker
			if tt.other != nil {
				f.observe("Deployment default/api", tt.other)
			}
			var got []Problem
			for _, c := range tt.checks {
				got = f.observe("Deployment default/web", c)
			}
			if len(got) != tt.want {
				t.Fatalf("final after the last check: %v, want %d", got, tt.want)
			}
		})
	}
}

// fakeWatcher is a status watch whose events the test sends.
type fakeWatcher struct{ ch chan pollevent.Event }

func (f fakeWatcher) Watch(context.Context, object.ObjMetadataSet, watcher.Options) <-chan pollevent.Event {
	return f.ch
}

func TestRereadingWatcher(t *testing.T) {
	cm := obj("v1", "ConfigMap", "seen")
	widget := obj("example.fke.dev/v1", "Widget", "missed")
	widget.Object["status"] = map[string]any{"observedGeneration": int64(1)}
	widget.SetGeneration(1)
	later := obj("v1", "Secret", "later")
	ids := object.ObjMetadataSet{object.UnstructuredToObjMetadata(cm), object.UnstructuredToObjMetadata(widget), object.UnstructuredToObjMetadata(later)}
	live := map[object.ObjMetadata]*unstructured.Unstructured{ids[0]: cm, ids[1]: widget}
	reads := map[object.ObjMetadata]int{}
	inner := fakeWatcher{ch: make(chan pollevent.Event)}
	w := &rereadingWatcher{inner: inner, interval: 10 * time.Millisecond, read: func(_ context.Context, id object.ObjMetadata) (*unstructured.Unstructured, error) {
		reads[id]++
		return live[id], nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	out := w.Watch(ctx, ids, watcher.Options{})

	inner.ch <- pollevent.Event{Type: pollevent.ResourceUpdateEvent, Resource: &pollevent.ResourceStatus{Identifier: ids[0], Status: status.CurrentStatus, Resource: cm}}
	if ev := <-out; ev.Resource.Identifier != ids[0] {
		t.Fatalf("the watch's own event was not passed on first: %v", ev)
	}
	inner.ch <- pollevent.Event{Type: pollevent.SyncEvent}
	if ev := <-out; ev.Type != pollevent.SyncEvent {
		t.Fatalf("want the sync event, got %v", ev)
	}
	// The Widget the watch never reported is read and reported, once.
	ev := <-out
	if ev.Type != pollevent.ResourceUpdateEvent || ev.Resource.Identifier != ids[1] || ev.Resource.Status != status.CurrentStatus {
		t.Fatalf("want the Widget reported Current by a re-read, got %+v", ev.Resource)
	}
	// Let a few more rounds pass: no second event for the same status, and
	// an object the watch reported is never read.
	deadline := time.After(100 * time.Millisecond)
	for wait := true; wait; {
		select {
		case ev := <-out:
			t.Fatalf("unexpected event %+v", ev.Resource)
		case <-deadline:
			wait = false
		}
	}
	cancel()
	close(inner.ch)
	for range out {
	}
	if reads[ids[0]] != 0 {
		t.Errorf("the reported ConfigMap was read %d times", reads[ids[0]])
	}
	if reads[ids[1]] < 2 || reads[ids[2]] < 2 {
		t.Errorf("reads %v: want the unreported Widget and the Secret not there yet read every round", reads)
	}
}
