package kwok

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

func TestWaitingForKwok(t *testing.T) {
	deleted := metav1.Now()
	for _, tt := range []struct {
		name string
		pod  func(*corev1.Pod)
		want bool
	}{
		{"bound and pending without statuses", func(*corev1.Pod) {}, true},
		{"not bound", func(p *corev1.Pod) { p.Spec.NodeName = "" }, false},
		{"running", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }, false},
		{"being deleted", func(p *corev1.Pod) { p.DeletionTimestamp = &deleted }, false},
		{"a container status", func(p *corev1.Pod) { p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c"}} }, false},
		{"an init container status", func(p *corev1.Pod) { p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "i"}} }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := pendingPod("p", "n")
			tt.pod(p)
			if got := waitingForKwok(p); got != tt.want {
				t.Errorf("waitingForKwok = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRedriveDue(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	after := 10 * time.Second
	for _, tt := range []struct {
		name string
		tr   podTrack
		at   time.Duration // since t0
		want bool
	}{
		{"new", podTrack{seen: t0}, 0, false},
		{"just before the first", podTrack{seen: t0}, after - time.Millisecond, false},
		{"the first", podTrack{seen: t0}, after, true},
		{"second waits twice as long", podTrack{seen: t0, redriven: t0, attempts: 1}, 2*after - time.Millisecond, false},
		{"second", podTrack{seen: t0, redriven: t0, attempts: 1}, 2 * after, true},
		{"third waits four times as long", podTrack{seen: t0, redriven: t0, attempts: 2}, 3 * after, false},
		{"bounded", podTrack{seen: t0, redriven: t0, attempts: 30}, maxRedriveInterval, true},
		{"bounded, not yet", podTrack{seen: t0, redriven: t0, attempts: 30}, maxRedriveInterval - time.Second, false},
		{"not on a kwok node", podTrack{seen: t0, notKwok: true}, time.Hour, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := redriveDue(tt.tr, t0.Add(tt.at), after); got != tt.want {
				t.Errorf("redriveDue(%+v, +%s) = %v, want %v", tt.tr, tt.at, got, tt.want)
			}
		})
	}
}

// TestRedriverScan: a pod waiting on a kwok node is re-driven once it has
// waited StuckPodAfter (an annotation, a Warning event, the counter), again
// only after twice as long; a pod on another node is left alone; a pod
// that is gone is forgotten.
func TestRedriverScan(t *testing.T) {
	kwokNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "k1", Annotations: map[string]string{AnnotationNode: AnnotationNodeValue}}}
	realNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "r1"}}
	stuck, other := pendingPod("stuck", "k1"), pendingPod("other", "r1")
	client := fake.NewClientset(kwokNode, realNode, stuck, other)
	now := time.Unix(1_000_000, 0)
	const cluster = "test/scan"
	r := &redriver{client: client, clusterKey: cluster, after: 10 * time.Second, log: slog.New(slog.DiscardHandler),
		now: func() time.Time { return now }, tracks: map[types.UID]*podTrack{}}
	ctx := context.Background()
	pods := []any{stuck, other}
	patches := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "patch" {
				n++
			}
		}
		return n
	}

	r.scan(ctx, pods)
	now = now.Add(9 * time.Second)
	r.scan(ctx, pods)
	if n := patches(); n != 0 {
		t.Fatalf("%d patches before the pod waited 10s", n)
	}
	now = now.Add(time.Second)
	r.scan(ctx, pods)
	got, err := client.CoreV1().Pods("default").Get(ctx, "stuck", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[AnnotationRedriven] == "" {
		t.Errorf("stuck pod not annotated: %v", got.Annotations)
	}
	if n := patches(); n != 1 {
		t.Errorf("%d patches after one re-drive, want 1 (the pod on a node kwok does not manage is left alone)", n)
	}
	events, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 1 || events.Items[0].Reason != EventReasonStuckOnKwokNode || events.Items[0].Type != corev1.EventTypeWarning ||
		events.Items[0].InvolvedObject.Name != "stuck" {
		t.Errorf("events = %+v, want one Warning %s on pod stuck", events.Items, EventReasonStuckOnKwokNode)
	}
	if v := testutil.ToFloat64(stuckPods.WithLabelValues(cluster)); v != 1 {
		t.Errorf("fke_kwok_stuck_pods_total = %v, want 1", v)
	}

	// Still stuck: again only after 20s, and counted once.
	now = now.Add(19 * time.Second)
	r.scan(ctx, pods)
	if n := patches(); n != 1 {
		t.Errorf("%d patches 19s after the first re-drive, want 1", n)
	}
	now = now.Add(time.Second)
	r.scan(ctx, pods)
	if n := patches(); n != 2 {
		t.Errorf("%d patches 20s after the first re-drive, want 2", n)
	}
	if v := testutil.ToFloat64(stuckPods.WithLabelValues(cluster)); v != 1 {
		t.Errorf("fke_kwok_stuck_pods_total = %v after a second re-drive of the same pod, want 1", v)
	}

	// Gone from the watch (Running): forgotten.
	r.scan(ctx, []any{other})
	if len(r.tracks) != 1 {
		t.Errorf("tracks %d pods, want only the one still pending", len(r.tracks))
	}
}

func pendingPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
}
