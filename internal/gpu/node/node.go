// Package node is the agent's access to its own Node object: reading it,
// patching its labels and status conditions, and recording Events on it. It
// reports health monitor failures as the Node condition
// GPUHealthMonitorFailed and Events, and reads allocatable for the device
// plugin's self-check.
package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/gpu/health"
	"fke.dev/fke/internal/gpu/labels"
)

// API is the small slice of the Kubernetes API the agent uses.
type API interface {
	// GetNode returns the Node called name.
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	// PatchNode applies a patch of type pt to the Node or one of its subresources ("status").
	PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) error
	// CreateEvent records an Event.
	CreateEvent(ctx context.Context, ev *corev1.Event) error
}

// FromCoreV1 implements API with a client-go core/v1 client.
func FromCoreV1(c corev1client.CoreV1Interface) API { return coreAPI{c} }

type coreAPI struct{ c corev1client.CoreV1Interface }

var _ API = coreAPI{}
var _ labels.NodeAPI = coreAPI{}

func (a coreAPI) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return a.c.Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (a coreAPI) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, sub ...string) error {
	_, err := a.c.Nodes().Patch(ctx, name, pt, data, metav1.PatchOptions{FieldManager: "fke-gpu-agent"}, sub...)
	return err
}

func (a coreAPI) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	_, err := a.c.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// ConditionMonitorFailed is the Node condition set while GPU health monitoring does not work.
const ConditionMonitorFailed = corev1.NodeConditionType(fkev1.NodeConditionGPUHealthMonitorFailed)

// EventNamespace is where Node events are recorded (as the kubelet does).
const EventNamespace = "default"

// Reporter implements health.Reporter on the Node: the condition
// GPUHealthMonitorFailed (True with reason and message while monitoring is
// broken, False once it runs) and Warning/Normal Events.
type Reporter struct {
	API   API
	Node  string
	Clock clock.PassiveClock

	mu   sync.Mutex
	last string // last condition status+reason written, to avoid repeated patches and events
}

var _ health.Reporter = (*Reporter)(nil)

func (r *Reporter) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

func (r *Reporter) MonitorFailed(ctx context.Context, reason, message string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := "True/" + reason
	if r.last == key {
		return nil
	}
	if err := r.setCondition(ctx, corev1.ConditionTrue, reason, message); err != nil {
		return err
	}
	r.last = key
	return r.event(ctx, corev1.EventTypeWarning, "GPUHealthMonitorFailed", reason+": "+message)
}

func (r *Reporter) MonitorRunning(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == "False" {
		return nil
	}
	if err := r.setCondition(ctx, corev1.ConditionFalse, "MonitorRunning", "GPU health monitor is watching XID and ECC events"); err != nil {
		return err
	}
	r.last = "False"
	return nil
}

func (r *Reporter) DeviceChanged(ctx context.Context, uuid string, st health.Status) error {
	if st.State == health.Unhealthy {
		return r.event(ctx, corev1.EventTypeWarning, "GPUUnhealthy",
			fmt.Sprintf("GPU %s marked unhealthy: %s (class %s); removed from allocatable until it recovers", uuid, st.Reason, st.Class))
	}
	return r.event(ctx, corev1.EventTypeNormal, "GPUHealthy", fmt.Sprintf("GPU %s is usable again", uuid))
}

func (r *Reporter) setCondition(ctx context.Context, status corev1.ConditionStatus, reason, message string) error {
	now := metav1.NewTime(r.now())
	patch := map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: ConditionMonitorFailed, Status: status, Reason: reason, Message: message,
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}}}
	data, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("encoding condition patch: %w", err)
	}
	if err := r.API.PatchNode(ctx, r.Node, types.StrategicMergePatchType, data, "status"); err != nil {
		return fmt.Errorf("setting condition %s=%s on node %s: %w", ConditionMonitorFailed, status, r.Node, err)
	}
	return nil
}

func (r *Reporter) event(ctx context.Context, typ, reason, message string) error {
	now := metav1.NewTime(r.now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: r.Node + ".", Namespace: EventNamespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: r.Node, UID: types.UID(r.Node), APIVersion: "v1"},
		Reason:         reason,
		Message:        message,
		Type:           typ,
		Source:         corev1.EventSource{Component: "fke-gpu-agent", Host: r.Node},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if err := r.API.CreateEvent(ctx, ev); err != nil {
		return fmt.Errorf("recording event %s on node %s: %w", reason, r.Node, err)
	}
	return nil
}

// Allocatable implements deviceplugin.AllocatableSource from the Node's
// status (the agent asserts it: this package stays free of the NVML
// bindings, which the manager links through it).
type Allocatable struct {
	API  API
	Node string
}

// Allocatable returns the Node's nvidia.com/ allocatable quantities.
func (a Allocatable) Allocatable(ctx context.Context) (map[string]int64, error) {
	n, err := a.API.GetNode(ctx, a.Node)
	if err != nil {
		return nil, fmt.Errorf("getting node %s: %w", a.Node, err)
	}
	out := map[string]int64{}
	for name, q := range n.Status.Allocatable {
		if strings.HasPrefix(string(name), labels.Prefix) {
			out[string(name)] = q.Value()
		}
	}
	return out, nil
}
