package tenant

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NewEvent returns a core/v1 Event about the object at ref, reported by
// fke-manager's controller (e.g. "fke.dev/autoscaler"), for a tenant cluster:
// `kubectl describe` there shows it.
func NewEvent(ref corev1.ObjectReference, eventType, reason, message, controller string, now time.Time) *corev1.Event {
	ts := metav1.NewTime(now)
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ref.Namespace, GenerateName: ref.Name + "."},
		InvolvedObject: ref,
		Reason:         reason,
		Message:        message,
		Type:           eventType,
		Source:         corev1.EventSource{Component: controller},
		FirstTimestamp: ts,
		LastTimestamp:  ts,
		// EventTime keeps microseconds (the timestamps above keep seconds);
		// with it set, the API requires an action: the reason says it.
		EventTime:           metav1.NewMicroTime(now),
		Action:              reason,
		Count:               1,
		ReportingController: controller,
		ReportingInstance:   "fke-manager",
	}
}
