package node

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"fke.dev/fke/internal/gpu/health"
)

type patch struct {
	pt   types.PatchType
	data string
	sub  []string
}

type fakeAPI struct {
	node    *corev1.Node
	patches []patch
	events  []*corev1.Event
}

func (f *fakeAPI) GetNode(context.Context, string) (*corev1.Node, error) { return f.node, nil }
func (f *fakeAPI) PatchNode(_ context.Context, _ string, pt types.PatchType, data []byte, sub ...string) error {
	f.patches = append(f.patches, patch{pt, string(data), sub})
	return nil
}
func (f *fakeAPI) CreateEvent(_ context.Context, ev *corev1.Event) error {
	f.events = append(f.events, ev)
	return nil
}

func TestReporterCondition(t *testing.T) {
	f := &fakeAPI{}
	r := &Reporter{API: f, Node: "gpu-1", Clock: clocktesting.NewFakeClock(time.Unix(100, 0))}
	ctx := context.Background()
	if err := r.MonitorFailed(ctx, "EventSubscriptionFailed", "ERROR_NOT_SUPPORTED"); err != nil {
		t.Fatal(err)
	}
	if err := r.MonitorFailed(ctx, "EventSubscriptionFailed", "ERROR_NOT_SUPPORTED"); err != nil {
		t.Fatal(err)
	}
	if len(f.patches) != 1 || len(f.events) != 1 {
		t.Fatalf("patches %d events %d, want 1 and 1 (idempotent)", len(f.patches), len(f.events))
	}
	p := f.patches[0]
	if p.pt != types.StrategicMergePatchType || len(p.sub) != 1 || p.sub[0] != "status" {
		t.Fatalf("patch %+v", p)
	}
	var body struct {
		Status struct {
			Conditions []corev1.NodeCondition `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(p.data), &body); err != nil {
		t.Fatal(err)
	}
	c := body.Status.Conditions[0]
	if c.Type != ConditionMonitorFailed || c.Status != corev1.ConditionTrue || c.Reason != "EventSubscriptionFailed" || c.Message == "" {
		t.Fatalf("condition %+v", c)
	}
	ev := f.events[0]
	if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "gpu-1" || ev.Reason != "GPUHealthMonitorFailed" {
		t.Fatalf("event %+v", ev)
	}
	if err := r.MonitorRunning(ctx); err != nil {
		t.Fatal(err)
	}
	if len(f.patches) != 2 || !contains(f.patches[1].data, `"status":"False"`) {
		t.Fatalf("running patch %+v", f.patches)
	}
	if err := r.DeviceChanged(ctx, "GPU-x", health.Status{State: health.Unhealthy, Reason: "XID79", Class: health.ClassReboot}); err != nil {
		t.Fatal(err)
	}
	if last := f.events[len(f.events)-1]; last.Reason != "GPUUnhealthy" || !contains(last.Message, "XID79") {
		t.Fatalf("device event %+v", last)
	}
}

func TestAllocatable(t *testing.T) {
	f := &fakeAPI{node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		"nvidia.com/gpu": resource.MustParse("7"), corev1.ResourceCPU: resource.MustParse("16"),
	}}}}
	got, err := Allocatable{API: f, Node: "n"}.Allocatable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["nvidia.com/gpu"] != 7 {
		t.Fatalf("got %v", got)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
