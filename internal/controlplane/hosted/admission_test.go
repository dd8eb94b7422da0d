package hosted

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"fke.dev/fke/internal/controlplane"
)

func TestAdmit(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	now := t0.Add(time.Minute)
	queued := func(key string, created time.Duration) planeStart {
		return planeStart{Key: key, Created: t0.Add(created)}
	}
	starting := func(key string, started time.Duration) planeStart {
		return planeStart{Key: key, Created: t0, Started: t0.Add(started)}
	}
	serving := func(key string) planeStart {
		return planeStart{Key: key, Created: t0, Started: t0, Serving: true}
	}
	for _, tc := range []struct {
		name            string
		key             string
		planes          []planeStart
		max             int
		ok              bool
		starting, ahead int
	}{
		{"alone", "a/x", []planeStart{queued("a/x", 0)}, 2, true, 0, 0},
		{"one starting, a place left", "a/x", []planeStart{starting("a/s", 0), queued("a/x", 0)}, 2, true, 1, 0},
		{"the places taken", "a/x", []planeStart{starting("a/s", 0), starting("a/t", 0), queued("a/x", 0)}, 2, false, 2, 0},
		{"serving planes hold no place", "a/x", []planeStart{serving("a/s"), serving("a/t"), starting("a/u", 0), queued("a/x", 0)}, 2, true, 1, 0},
		{"older queued planes go first", "a/x", []planeStart{starting("a/s", 0), queued("a/old", -time.Second), queued("a/x", 0)}, 2, false, 1, 1},
		{"younger queued planes wait", "a/x", []planeStart{starting("a/s", 0), queued("a/young", time.Second), queued("a/x", 0)}, 2, true, 1, 0},
		{"the same creation second: by key", "a/b", []planeStart{starting("a/s", 0), queued("a/a", 0), queued("a/b", 0)}, 2, false, 1, 1},
		{"the same creation second, first by key", "a/a", []planeStart{starting("a/s", 0), queued("a/a", 0), queued("a/b", 0)}, 2, true, 1, 0},
		{"a start past its deadline holds no place", "a/x", []planeStart{starting("a/stuck", -5*time.Minute), starting("a/t", 0), queued("a/x", 0)}, 2, true, 1, 0},
		{"no bound", "a/x", []planeStart{starting("a/s", 0), starting("a/t", 0), starting("a/u", 0), queued("a/x", 0)}, -1, true, 3, 0},
		{"its own namespace not listed yet", "a/new", []planeStart{starting("a/s", 0), queued("a/q", 0)}, 2, false, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, starting, ahead := admit(tc.key, tc.planes, now, tc.max)
			if ok != tc.ok || starting != tc.starting || ahead != tc.ahead {
				t.Errorf("admit = %v, %d starting, %d ahead; want %v, %d, %d", ok, starting, ahead, tc.ok, tc.starting, tc.ahead)
			}
		})
	}
}

// TestAdmitStart: with two planes starting, a third waits and says why;
// once one serves, it is let start and recorded so (a manager restarted
// then counts it); a plane whose API server already runs is not queued.
func TestAdmitStart(t *testing.T) {
	ctx := context.Background()
	created := metav1.NewTime(time.Now().Add(-time.Minute))
	started := time.Now().Add(-30 * time.Second).UTC().Format(time.RFC3339)
	tenant := func(key string, ann map[string]string) *corev1.Namespace {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: Namespace(key), Labels: map[string]string{LabelCluster: labelValue(key)},
			Annotations: map[string]string{AnnotationCluster: key}, CreationTimestamp: created,
		}}
		for k, v := range ann {
			ns.Annotations[k] = v
		}
		return ns
	}
	apiServer := func(key string, available int32) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace(key), Name: controlplane.APIServer, Labels: componentLabels(controlplane.APIServer)},
			Status:     appsv1.DeploymentStatus{AvailableReplicas: available},
		}
	}
	a, b := tenant("t/a", map[string]string{AnnotationStarted: started}), tenant("t/b", map[string]string{AnnotationStarted: started})
	c3 := tenant("t/c", nil)
	old := tenant("t/old", nil)
	aDep := apiServer("t/a", 0)
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithObjects(a, b, c3, old, aDep, apiServer("t/b", 0), apiServer("t/old", 2)).
		WithStatusSubresource(&appsv1.Deployment{}).Build()
	r, err := New(Options{Client: c, Registry: "registry.test/fke"})
	if err != nil {
		t.Fatal(err)
	}

	queued, err := r.admitStart(ctx, c3)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(queued, "2 control planes starting") || !strings.Contains(queued, "at most 2 start at once") {
		t.Errorf("queued = %q, want the two starting planes and the bound", queued)
	}
	if q, err := r.admitStart(ctx, old); q != "" || err != nil {
		t.Errorf("a plane whose API server runs: queued %q, %v", q, err)
	}

	aDep.Status.AvailableReplicas = 1
	if err := c.Status().Update(ctx, aDep); err != nil {
		t.Fatal(err)
	}
	if q, err := r.admitStart(ctx, c3); q != "" || err != nil {
		t.Fatalf("once t/a serves: queued %q, %v", q, err)
	}
	got := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(c3), got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[AnnotationStarted] == "" {
		t.Errorf("the start of t/c is not recorded: %v", got.Annotations)
	}
}
