package provreq

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fke.dev/fke/internal/autoscaler/decide"
	provreqv1 "fke.dev/fke/internal/autoscaler/provreq/v1"
)

// Condition reasons. Where Cluster Autoscaler defines a reason for the same
// situation fke uses its string, so tools that match on reasons work.
const (
	ReasonAccepted                       = "Accepted"                       // upstream
	ReasonCapacityIsFound                = "CapacityIsFound"                // upstream
	ReasonCapacityIsNotFound             = "CapacityIsNotFound"             // upstream
	ReasonCapacityIsProvisioned          = "CapacityIsProvisioned"          // upstream
	ReasonFailedToCreatePods             = "FailedToCreatePods"             // upstream
	ReasonCapacityReservationTimeExpired = "CapacityReservationTimeExpired" // upstream
	// ReasonProvisioning: the pool was grown; its new machines are not all
	// ready yet (Provisioned=False).
	ReasonProvisioning = "Provisioning"
	// ReasonClassNotSupported: fke does not serve the request's class (Failed=True).
	ReasonClassNotSupported = "ClassNotSupported"
	// ReasonProvisioningTimedOut: the grown pool's machines did not make
	// room for the pods within MaxProvisionTime (Failed=True).
	ReasonProvisioningTimedOut = "ProvisioningTimedOut"
)

// ParameterNoRetry is Cluster Autoscaler's spec.parameters key: "true"
// makes a best-effort-atomic request fail at once when the capacity cannot
// be provisioned now, instead of being tried again.
const ParameterNoRetry = "noRetry"

// AnnotationBooking on a ProvisioningRequest records the scale-up made for
// it (JSON Booking). It is written before the pool grows, so a restarted
// manager never grows a pool twice for one request.
const AnnotationBooking = "autoscaling.fke.dev/booking"

// Timing defaults.
const (
	// BookingTime is how long capacity stays booked for a request after
	// Provisioned=True before BookingExpired=True (Cluster Autoscaler's
	// default reservation time).
	BookingTime = 10 * time.Minute
	// MaxProvisionTime bounds the wait for a grown pool's machines.
	MaxProvisionTime = 15 * time.Minute
	// TemplateGracePeriod is how long a missing PodTemplate is waited for
	// before the request fails.
	TemplateGracePeriod = time.Minute
	// RecheckInterval is how often a request waiting for capacity is looked at again.
	RecheckInterval = 10 * time.Second
	// ProvisioningRecheckInterval is how often a provisioning request is
	// looked at again while its machines come up.
	ProvisioningRecheckInterval = 2 * time.Second
)

// Booking is the scale-up made for one request.
type Booking struct {
	// Pool is the NodePool that grew.
	Pool string `json:"pool"`
	// Nodes is how many machines were added.
	Nodes int `json:"nodes"`
	// From and To are the pool's desired replicas before and after.
	From int `json:"from"`
	To   int `json:"to"`
	// Time is when the pool was grown.
	Time metav1.Time `json:"time"`
}

// ParseBooking reads AnnotationBooking; nil when there is none.
func ParseBooking(pr *provreqv1.ProvisioningRequest) (*Booking, error) {
	v, ok := pr.Annotations[AnnotationBooking]
	if !ok || v == "" {
		return nil, nil
	}
	b := &Booking{}
	if err := json.Unmarshal([]byte(v), b); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationBooking, err)
	}
	return b, nil
}

// String is the annotation value.
func (b Booking) String() string {
	data, err := json.Marshal(b)
	if err != nil {
		return ""
	}
	return string(data)
}

// Input is what one decision about one request is made on.
type Input struct {
	Request *provreqv1.ProvisioningRequest
	// Pods are the request's pods (Count copies of each PodSet's template).
	Pods []*corev1.Pod
	// PodsError is set when the pods could not be built (a PodTemplate is
	// missing); Pods is then ignored.
	PodsError string
	Snapshot  decide.Snapshot
	// Pools are the autoscaled pools (see decide.BuildPools).
	Pools []decide.Pool
	// Replicas are the pools' desired replicas (spec.replicas), by name.
	Replicas map[string]int
	Now      time.Time
}

// Resize grows Pool's desired replicas From → To.
type Resize struct {
	Pool     string
	From, To int
	Reason   string
}

// Event is an event to record on the request.
type Event struct {
	Type, Reason, Message string
}

// Decision is what to do about one request, applied in field order:
// annotate the booking, resize, write the conditions, record events.
type Decision struct {
	// Conditions to set (meta.SetStatusCondition semantics).
	Conditions []metav1.Condition
	// Booking, when set, is written to AnnotationBooking before Resize.
	Booking *Booking
	Resize  *Resize
	Events  []Event
	// RequeueAfter asks for another look; 0 means none needed.
	RequeueAfter time.Duration
}

// Final reports whether the request is settled: Failed, BookingExpired or
// CapacityRevoked is True.
func Final(pr *provreqv1.ProvisioningRequest) bool {
	c := pr.Status.Conditions
	return meta.IsStatusConditionTrue(c, provreqv1.Failed) || meta.IsStatusConditionTrue(c, provreqv1.BookingExpired) ||
		meta.IsStatusConditionTrue(c, provreqv1.CapacityRevoked)
}

// Decide is the pure state machine of a ProvisioningRequest: Accepted →
// Provisioned (False while searching or provisioning, True when the pods
// fit ready nodes) → BookingExpired, or Failed.
//
//   - check-capacity.autoscaling.x-k8s.io never grows anything; a request
//     whose pods do not fit stays Provisioned=False and is checked again.
//   - best-effort-atomic-scale-up.autoscaling.x-k8s.io uses existing room
//     when the pods fit ready nodes; otherwise it grows the one pool that
//     takes all pods with the fewest new nodes (then the cheapest) in one
//     step. When no pool can, nothing grows: the request fails if no pool
//     ever could (a pod fits none of its nodes, or the gang needs more than
//     its max size or the cluster limits), and otherwise stays
//     Provisioned=False and is tried again, unless parameter noRetry is
//     "true".
func Decide(in Input) Decision {
	pr := in.Request
	var d Decision
	if Final(pr) {
		return d
	}
	cond := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		d.Conditions = append(d.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: pr.Generation, LastTransitionTime: metav1.NewTime(in.Now),
		})
	}
	fail := func(reason, msg string) {
		cond(provreqv1.Failed, metav1.ConditionTrue, reason, msg)
		d.Events = append(d.Events, Event{corev1.EventTypeWarning, reason, msg})
	}

	class := pr.Spec.ProvisioningClassName
	if class != provreqv1.ClassCheckCapacity && class != provreqv1.ClassBestEffortAtomicScaleUp {
		cond(provreqv1.Accepted, metav1.ConditionFalse, ReasonClassNotSupported, fmt.Sprintf("provisioning class %q is not supported", class))
		fail(ReasonClassNotSupported, fmt.Sprintf("provisioning class %q is not supported; fke supports %s and %s",
			class, provreqv1.ClassCheckCapacity, provreqv1.ClassBestEffortAtomicScaleUp))
		return d
	}
	if !meta.IsStatusConditionTrue(pr.Status.Conditions, provreqv1.Accepted) {
		cond(provreqv1.Accepted, metav1.ConditionTrue, ReasonAccepted, "ProvisioningRequest is accepted by fke")
	}

	// Provisioned: the booking lasts BookingTime.
	if p := meta.FindStatusCondition(pr.Status.Conditions, provreqv1.Provisioned); p != nil && p.Status == metav1.ConditionTrue {
		if left := p.LastTransitionTime.Add(BookingTime).Sub(in.Now); left > 0 {
			d.RequeueAfter = left
			return d
		}
		cond(provreqv1.BookingExpired, metav1.ConditionTrue, ReasonCapacityReservationTimeExpired, "Capacity reservation time is expired")
		return d
	}

	if in.PodsError != "" {
		if in.Now.Sub(pr.CreationTimestamp.Time) < TemplateGracePeriod {
			cond(provreqv1.Provisioned, metav1.ConditionFalse, ReasonFailedToCreatePods, in.PodsError)
			d.RequeueAfter = RecheckInterval
			return d
		}
		fail(ReasonFailedToCreatePods, in.PodsError)
		return d
	}

	fits, why := decide.CheckCapacity(in.Snapshot, in.Pods)
	if class == provreqv1.ClassCheckCapacity {
		if fits {
			provisioned(&d, cond, ReasonCapacityIsFound, "Capacity is found in the cluster")
			return d
		}
		setIfChanged(&d, pr, cond, provreqv1.Provisioned, metav1.ConditionFalse, ReasonCapacityIsNotFound, "Capacity is not found: "+why)
		d.RequeueAfter = RecheckInterval
		return d
	}

	booking, err := ParseBooking(pr)
	if err != nil {
		fail(ReasonFailedToCreatePods, err.Error())
		return d
	}
	if booking == nil {
		if fits {
			provisioned(&d, cond, ReasonCapacityIsFound, "Capacity is found in the cluster")
			return d
		}
		scaleUp(in, &d, cond, fail)
		return d
	}

	// A pool was grown for the request: wait for its machines, until
	// kube-scheduler can place the pods on them (Kueue lets them go as
	// soon as the request says Provisioned).
	if fits, _ = decide.CheckCapacity(in.Snapshot.Schedulable(), in.Pods); fits {
		provisioned(&d, cond, ReasonCapacityIsProvisioned,
			fmt.Sprintf("Capacity is provisioned: pool %s grew by %d nodes", booking.Pool, booking.Nodes))
		return d
	}
	if in.Now.Sub(booking.Time.Time) > MaxProvisionTime {
		fail(ReasonProvisioningTimedOut, fmt.Sprintf("pool %s grew by %d nodes at %s but the pods still do not fit after %s: %s",
			booking.Pool, booking.Nodes, booking.Time.UTC().Format(time.RFC3339), MaxProvisionTime, why))
		return d
	}
	if cur, ok := in.Replicas[booking.Pool]; !ok {
		fail(ReasonCapacityIsNotFound, fmt.Sprintf("node pool %s booked for the request is gone", booking.Pool))
		return d
	} else if cur < booking.To {
		// The booking was written but the resize did not happen (restart
		// in between) or was undone: grow to the booked size, never beyond.
		d.Resize = &Resize{Pool: booking.Pool, From: cur, To: booking.To, Reason: resizeReason(pr, booking.To-cur)}
	}
	setIfChanged(&d, pr, cond, provreqv1.Provisioned, metav1.ConditionFalse, ReasonProvisioning,
		fmt.Sprintf("Pool %s is growing by %d nodes (%d → %d); waiting for them to be ready", booking.Pool, booking.Nodes, booking.From, booking.To))
	d.RequeueAfter = ProvisioningRecheckInterval
	return d
}

type condFunc func(typ string, status metav1.ConditionStatus, reason, msg string)

func provisioned(d *Decision, cond condFunc, reason, msg string) {
	cond(provreqv1.Provisioned, metav1.ConditionTrue, reason, msg)
	d.Events = append(d.Events, Event{corev1.EventTypeNormal, reason, msg})
	d.RequeueAfter = BookingTime
}

// setIfChanged sets a condition unless it already has this status, reason
// and message (so a request re-checked every pass is not rewritten).
func setIfChanged(d *Decision, pr *provreqv1.ProvisioningRequest, cond condFunc, typ string, status metav1.ConditionStatus, reason, msg string) {
	if c := meta.FindStatusCondition(pr.Status.Conditions, typ); c != nil && c.Status == status && c.Reason == reason && c.Message == msg {
		return
	}
	cond(typ, status, reason, msg)
}

// option is one pool able to take the whole gang.
type option struct {
	pool  decide.Pool
	nodes int
}

func scaleUp(in Input, d *Decision, cond condFunc, fail func(reason, msg string)) {
	pr := in.Request
	var opts []option
	var reasons []string
	retry := false
	for _, p := range in.Pools {
		r := decide.ScaleUpAtomic(in.Snapshot, p, in.Pods, in.Now)
		if !r.OK {
			reasons = append(reasons, r.Reason)
			retry = retry || r.Retry
			continue
		}
		cur, known := in.Replicas[p.Name]
		if !known || r.Nodes <= 0 || cur+r.Nodes > p.MaxSize {
			reasons = append(reasons, fmt.Sprintf("max size of pool %s reached: need %d, %d allowed", p.Name, r.Nodes, max(p.MaxSize-cur, 0)))
			retry = retry || r.Nodes <= p.MaxSize
			continue
		}
		opts = append(opts, option{pool: p, nodes: r.Nodes})
	}
	if len(opts) == 0 {
		msg := "no autoscaled node pool"
		if len(reasons) > 0 {
			msg = strings.Join(reasons, "; ")
		}
		if retry && pr.Spec.Parameters[ParameterNoRetry] != "true" {
			// Room may free up (a backoff ends, nodes go away): look again.
			setIfChanged(d, pr, cond, provreqv1.Provisioned, metav1.ConditionFalse, ReasonCapacityIsNotFound,
				"Capacity is not found, fke will try again: "+msg)
			d.RequeueAfter = RecheckInterval
			return
		}
		fail(ReasonCapacityIsNotFound, "Capacity is not found: "+msg)
		return
	}
	sort.SliceStable(opts, func(a, b int) bool {
		x, y := opts[a], opts[b]
		if x.nodes != y.nodes {
			return x.nodes < y.nodes
		}
		cx, cy := float64(x.nodes)*x.pool.PricePerHour, float64(y.nodes)*y.pool.PricePerHour
		if (cx > 0) != (cy > 0) {
			return cx > 0 // priced pools before unknown prices
		}
		if cx != cy {
			return cx < cy
		}
		return x.pool.Name < y.pool.Name
	})
	best := opts[0]
	from := in.Replicas[best.pool.Name]
	b := &Booking{Pool: best.pool.Name, Nodes: best.nodes, From: from, To: from + best.nodes, Time: metav1.NewTime(in.Now)}
	d.Booking = b
	d.Resize = &Resize{Pool: b.Pool, From: b.From, To: b.To, Reason: resizeReason(pr, b.Nodes)}
	msg := fmt.Sprintf("Pool %s is growing by %d nodes (%d → %d); waiting for them to be ready", b.Pool, b.Nodes, b.From, b.To)
	cond(provreqv1.Provisioned, metav1.ConditionFalse, ReasonProvisioning, msg)
	d.Events = append(d.Events, Event{corev1.EventTypeNormal, "TriggeredScaleUp",
		fmt.Sprintf("pods of the request need %d new %s nodes: [{%s %d->%d (max: %d)}]", b.Nodes, b.Pool, b.Pool, b.From, b.To, best.pool.MaxSize)})
	d.RequeueAfter = ProvisioningRecheckInterval
}

func resizeReason(pr *provreqv1.ProvisioningRequest, nodes int) string {
	return fmt.Sprintf("ProvisioningRequest %s/%s needs %d more nodes at once", pr.Namespace, pr.Name, nodes)
}
