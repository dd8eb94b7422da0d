package nodepool

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// Repair defaults (GKE and Cluster API use minutes too).
const (
	DefaultNodeUnhealthyTimeout = 5 * time.Minute
	DefaultNodeStartupTimeout   = 10 * time.Minute
	DefaultGPUUnhealthyTimeout  = 10 * time.Minute
	// RepairWindow is how far back repairs count for the backoff.
	RepairWindow = time.Hour
	// repairsBeforeBackoff repairs in RepairWindow are free; each further
	// one waits twice as long as the one before, from RepairBackoffBase up
	// to RepairBackoffMax after the last repair.
	repairsBeforeBackoff = 3
	RepairBackoffBase    = time.Minute
	RepairBackoffMax     = 30 * time.Minute
)

var defaultMaxUnhealthy = intstr.FromString("40%")

// RepairPolicy is a pool's repair settings with the defaults applied.
type RepairPolicy struct {
	Disabled             bool
	NodeUnhealthyTimeout time.Duration
	NodeStartupTimeout   time.Duration
	GPUUnhealthyTimeout  time.Duration
	MaxUnhealthy         intstr.IntOrString
}

// RepairPolicyOf returns np's repair policy.
func RepairPolicyOf(np *fkev1.NodePool) RepairPolicy {
	r := np.Spec.Repair
	p := RepairPolicy{Disabled: r.Disabled, NodeUnhealthyTimeout: DefaultNodeUnhealthyTimeout,
		NodeStartupTimeout: DefaultNodeStartupTimeout, GPUUnhealthyTimeout: DefaultGPUUnhealthyTimeout, MaxUnhealthy: defaultMaxUnhealthy}
	if r.NodeUnhealthyTimeout != nil {
		p.NodeUnhealthyTimeout = r.NodeUnhealthyTimeout.Duration
	}
	if r.NodeStartupTimeout != nil {
		p.NodeStartupTimeout = r.NodeStartupTimeout.Duration
	}
	if r.GPUUnhealthyTimeout != nil {
		p.GPUUnhealthyTimeout = r.GPUUnhealthyTimeout.Duration
	}
	if r.MaxUnhealthy != nil {
		p.MaxUnhealthy = *r.MaxUnhealthy
	}
	return p
}

// MachineHealth is what repair needs of one machine: its age and its
// Registered and GPUReady conditions (set by the machine controller from
// the Node: Registered is False while the Node is missing or not Ready;
// GPUReady is False while fewer GPUs than the instance type's are
// allocatable or the GPU health monitor cannot run).
type MachineHealth struct {
	Name     string
	Created  time.Time
	Deleting bool
	// EverReady: the node was Ready with its GPUs once (startup is over).
	EverReady bool
	// Registered and GPUReady are the conditions (nil when not set yet).
	Registered *metav1.Condition
	GPUReady   *metav1.Condition
}

// HealthOf extracts m's MachineHealth.
func HealthOf(m *fkev1.Machine) MachineHealth {
	return MachineHealth{
		Name: m.Name, Created: m.CreationTimestamp.Time, Deleting: !m.DeletionTimestamp.IsZero(), EverReady: m.Status.FirstReadyTime != nil,
		Registered: meta.FindStatusCondition(m.Status.Conditions, fkev1.ConditionRegistered),
		GPUReady:   meta.FindStatusCondition(m.Status.Conditions, fkev1.ConditionGPUReady),
	}
}

// Verdict says whether and since when a machine is unhealthy.
type Verdict struct {
	// Unhealthy: the machine is past its deadline.
	Unhealthy bool
	// Reason is NodeStartupTimeout, NodeNotReady or GPUUnhealthy.
	Reason string
	// Message explains it for events and conditions.
	Message string
	// Deadline is when the machine becomes (or became) unhealthy; zero
	// for a healthy machine.
	Deadline time.Time
}

// Judge decides whether h is unhealthy at now under p. A Node that is not
// Ready (or missing) gets NodeUnhealthyTimeout from when that began, but a
// machine whose node never came up gets NodeStartupTimeout from its
// creation first; a Ready node's GPUs below the instance type's get
// GPUUnhealthyTimeout.
func Judge(h MachineHealth, p RepairPolicy, now time.Time) Verdict {
	if h.Deleting {
		return Verdict{}
	}
	startup := h.Created.Add(p.NodeStartupTimeout)
	if h.EverReady {
		startup = time.Time{} // the node came up once: no startup grace
	}
	var v Verdict
	switch {
	case h.Registered == nil || h.Registered.Status != metav1.ConditionTrue:
		since := h.Created
		msg := "the node never registered"
		if h.Registered != nil {
			since, msg = h.Registered.LastTransitionTime.Time, h.Registered.Message
		}
		v.Deadline = laterOf(startup, since.Add(p.NodeUnhealthyTimeout))
		v.Reason = "NodeNotReady"
		if !h.EverReady && !v.Deadline.After(startup) {
			v.Reason = "NodeStartupTimeout"
		}
		v.Message = fmt.Sprintf("%s (since %s)", msg, since.UTC().Format(time.RFC3339))
	case h.GPUReady != nil && h.GPUReady.Status != metav1.ConditionTrue:
		// The node is up; its GPUs get GPUUnhealthyTimeout from when they
		// fell short (or since the node came up, for a plugin that never
		// registers).
		since := h.GPUReady.LastTransitionTime.Time
		v.Deadline = since.Add(p.GPUUnhealthyTimeout)
		v.Reason = "GPUUnhealthy"
		v.Message = fmt.Sprintf("%s (since %s)", h.GPUReady.Message, since.UTC().Format(time.RFC3339))
	default:
		return Verdict{}
	}
	v.Unhealthy = !now.Before(v.Deadline)
	return v
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// RepairPlan is what repair does for a pool now.
type RepairPlan struct {
	// Repair lists the machines to replace, with why.
	Repair []RepairAction
	// Blocked explains why unhealthy machines are left alone (too many
	// unhealthy, or backing off); empty otherwise.
	Blocked string
	// Next is when the plan may change (a deadline or the backoff ends); zero when nothing is pending.
	Next time.Time
}

// RepairAction is one machine to replace.
type RepairAction struct {
	Machine string
	Verdict Verdict
}

// PlanRepair decides which of a pool's machines to replace at now. Nothing
// is repaired when the policy is disabled, when more machines are unhealthy
// (past their deadline, or once Ready and failing now) than MaxUnhealthy allows (a count, or a percentage of the live machines
// rounded down but at least one), or while the pool backs off after many
// recent repairs (at times recent, newest last).
func PlanRepair(p RepairPolicy, machines []MachineHealth, recent []time.Time, now time.Time) RepairPlan {
	var plan RepairPlan
	if p.Disabled {
		return plan
	}
	live, failing := 0, 0
	var unhealthy []RepairAction
	for _, h := range machines {
		if h.Deleting {
			continue
		}
		live++
		v := Judge(h, p, now)
		switch {
		case v.Unhealthy:
			unhealthy = append(unhealthy, RepairAction{Machine: h.Name, Verdict: v})
			failing++
		case !v.Deadline.IsZero():
			plan.Next = earliest(plan.Next, v.Deadline)
			if h.EverReady {
				failing++ // failing now, due later: a fault of many nodes shows at once
			}
		}
	}
	if len(unhealthy) == 0 {
		return plan
	}
	sort.Slice(unhealthy, func(i, j int) bool { return unhealthy[i].Machine < unhealthy[j].Machine })
	allowed, err := intstr.GetScaledValueFromIntOrPercent(&p.MaxUnhealthy, live, false)
	if err != nil {
		allowed = 0
	}
	if p.MaxUnhealthy.Type == intstr.String && allowed == 0 && p.MaxUnhealthy.StrVal != "0%" {
		allowed = 1 // a percentage allows one machine, so that small pools are repaired too
	}
	if failing > allowed {
		plan.Blocked = fmt.Sprintf("%d of %d machines are unhealthy, more than maxUnhealthy %s allows (%d): repair stops until fewer are",
			failing, live, p.MaxUnhealthy.String(), allowed)
		return plan
	}
	if wait := BackoffUntil(recent, now); wait.After(now) {
		plan.Blocked = fmt.Sprintf("%d repairs in the last %s: backing off until %s", countSince(recent, now.Add(-RepairWindow)), RepairWindow, wait.UTC().Format(time.RFC3339))
		plan.Next = earliest(plan.Next, wait)
		return plan
	}
	plan.Repair = unhealthy
	return plan
}

// BackoffUntil returns when the next repair may start given the recent
// ones: at once for the first repairsBeforeBackoff in RepairWindow, then
// RepairBackoffBase after the last, doubling per further repair.
func BackoffUntil(recent []time.Time, now time.Time) time.Time {
	n := countSince(recent, now.Add(-RepairWindow))
	if n < repairsBeforeBackoff || len(recent) == 0 {
		return time.Time{}
	}
	wait := RepairBackoffBase
	for i := repairsBeforeBackoff; i < n && wait < RepairBackoffMax; i++ {
		wait *= 2
	}
	wait = min(wait, RepairBackoffMax)
	return recent[len(recent)-1].Add(wait)
}

func countSince(ts []time.Time, since time.Time) int {
	n := 0
	for _, t := range ts {
		if t.After(since) {
			n++
		}
	}
	return n
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// ParseRepairs reads the pool's repair history annotation (unix seconds,
// comma-separated, oldest first); unreadable entries are skipped.
func ParseRepairs(s string) []time.Time {
	var out []time.Time
	for _, f := range strings.Split(s, ",") {
		if sec, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64); err == nil {
			out = append(out, time.Unix(sec, 0))
		}
	}
	return out
}

// FormatRepairs writes the history, keeping the entries of RepairWindow.
func FormatRepairs(ts []time.Time, now time.Time) string {
	var parts []string
	for _, t := range ts {
		if t.After(now.Add(-RepairWindow)) {
			parts = append(parts, strconv.FormatInt(t.Unix(), 10))
		}
	}
	return strings.Join(parts, ",")
}

// repair replaces np's unhealthy machines (see PlanRepair): each gets a
// Repairing condition and events, then is deleted (drained by the machine
// controller); the pool makes its replacement. It returns a requeue delay
// when it deleted machines (so that the pool sees them go), and when the
// plan may change next (a machine's deadline, the end of a backoff).
func (r *Reconciler) repair(ctx context.Context, np *fkev1.NodePool, live []*fkev1.Machine) (time.Duration, time.Time, error) {
	p := RepairPolicyOf(np)
	health := make([]MachineHealth, 0, len(live))
	for _, m := range live {
		health = append(health, HealthOf(m))
	}
	now := time.Now()
	recent := ParseRepairs(np.Annotations[fkev1.AnnotationRepairs])
	plan := PlanRepair(p, health, recent, now)
	if plan.Blocked != "" {
		if !meta.IsStatusConditionTrue(np.Status.Conditions, fkev1.ConditionRepairBlocked) {
			r.Recorder.Eventf(np, nil, corev1.EventTypeWarning, "RepairBlocked", "Repair", "%s", plan.Blocked)
		}
		meta.SetStatusCondition(&np.Status.Conditions, metav1.Condition{Type: fkev1.ConditionRepairBlocked, Status: metav1.ConditionTrue,
			Reason: "RepairBlocked", Message: plan.Blocked, ObservedGeneration: np.Generation})
	} else {
		meta.SetStatusCondition(&np.Status.Conditions, metav1.Condition{Type: fkev1.ConditionRepairBlocked, Status: metav1.ConditionFalse,
			Reason: "RepairAllowed", Message: "unhealthy machines are repaired", ObservedGeneration: np.Generation})
	}
	if len(plan.Repair) == 0 {
		return 0, plan.Next, nil
	}
	byName := map[string]*fkev1.Machine{}
	for _, m := range live {
		byName[m.Name] = m
	}
	for _, a := range plan.Repair {
		m := byName[a.Machine].DeepCopy() // live holds the cache's objects
		before := m.DeepCopy()
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: fkev1.ConditionRepairing, Status: metav1.ConditionTrue,
			Reason: a.Verdict.Reason, Message: "replacing the node: " + a.Verdict.Message, ObservedGeneration: m.Generation})
		if err := r.Client.Status().Patch(ctx, m, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return 0, time.Time{}, fmt.Errorf("marking machine %s as repairing: %w", m.Name, err)
		}
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, "Repairing", "Repair", "%s: replacing the node: %s", a.Verdict.Reason, a.Verdict.Message)
		r.Recorder.Eventf(np, nil, corev1.EventTypeWarning, "Repairing", "Repair", "machine %s (node %s): %s: %s", m.Name, m.Status.NodeName, a.Verdict.Reason, a.Verdict.Message)
		ctrllog.FromContext(ctx).Info("repairing machine", "machine", m.Name, "node", m.Status.NodeName, "reason", a.Verdict.Reason, "message", a.Verdict.Message)
		if err := r.Client.Delete(ctx, m); err != nil && !apierrors.IsNotFound(err) {
			return 0, time.Time{}, fmt.Errorf("deleting unhealthy machine %s: %w", m.Name, err)
		}
		recent = append(recent, now)
	}
	base := np.DeepCopy()
	if np.Annotations == nil {
		np.Annotations = map[string]string{}
	}
	np.Annotations[fkev1.AnnotationRepairs] = FormatRepairs(recent, now)
	if err := r.Client.Patch(ctx, np, client.MergeFrom(base)); err != nil {
		return 0, time.Time{}, fmt.Errorf("recording repairs: %w", err)
	}
	return time.Second, time.Time{}, nil
}
