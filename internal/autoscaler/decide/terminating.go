package decide

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TerminationMargin is added to a terminating pod's deletionTimestamp to
// give its deadline: the time by which the pod is expected to be gone. The
// API server sets deletionTimestamp to the time of the delete request plus
// the pod's grace period; the margin covers the kubelet (or kwok) noticing
// the deletion, killing the containers and removing the pod object.
const TerminationMargin = 15 * time.Second

// defaultGracePeriod is the API server's default
// terminationGracePeriodSeconds of a pod.
const defaultGracePeriod = 30 * time.Second

// TerminationDeadline returns when terminating pod p is expected to be
// gone (deletionTimestamp + TerminationMargin), and false when p is not
// terminating.
func TerminationDeadline(p *corev1.Pod) (time.Time, bool) {
	if p == nil || p.DeletionTimestamp == nil {
		return time.Time{}, false
	}
	return p.DeletionTimestamp.Add(TerminationMargin), true
}

// LeavingDeadline returns when pod p is expected to be gone: its
// TerminationDeadline when it is terminating; else, when its controller
// (the owner reference with controller: true) is in leaving (see
// Snapshot.LeavingOwners), the time the controller started leaving plus
// the pod's grace period (terminationGracePeriodSeconds, 30 s when unset)
// plus TerminationMargin, as if the garbage collector had deleted the pod
// at that time. False when p is neither.
func LeavingDeadline(p *corev1.Pod, leaving map[types.UID]time.Time) (time.Time, bool) {
	if d, ok := TerminationDeadline(p); ok || p == nil || len(leaving) == 0 {
		return d, ok
	}
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil {
		return time.Time{}, false
	}
	since, ok := leaving[ref.UID]
	if !ok {
		return time.Time{}, false
	}
	grace := defaultGracePeriod
	if s := p.Spec.TerminationGracePeriodSeconds; s != nil && *s >= 0 {
		grace = time.Duration(*s) * time.Second
	}
	return since.Add(grace + TerminationMargin), true
}

// freeing is the room the leaving pods of a ready node will free (pods
// that are terminating or whose controller is leaving, see
// LeavingDeadline): the sum of their requests and the earliest of their
// deadlines. Only pods whose deadline is after now count; a pod past its
// deadline holds its room as any bound pod does.
type freeing struct {
	req   resources
	until time.Time
}

// noteTerminating records bound pod pi (loaded on n) in n's freeing room
// when it is leaving and before its deadline at w.now.
func (w *world) noteTerminating(n *simNode, pi *podInfo) {
	if w.now.IsZero() {
		return
	}
	deadline, ok := LeavingDeadline(pi.pod, w.leaving)
	if !ok || !deadline.After(w.now) {
		return
	}
	if n.freeing == nil {
		n.freeing = &freeing{until: deadline}
	}
	n.freeing.req.add(pi.req, 1)
	if deadline.Before(n.freeing.until) {
		n.freeing.until = deadline
	}
}

// releaseTerminating gives every ready snapshot node the room of its
// terminating pods (see freeing), as if they were gone, and returns whether
// some node gained room. Only resources are released (cpu, memory, pod
// slots, GPUs and other extended resources): the host ports and the
// inter-pod (anti-)affinity of a terminating pod still count until it is
// gone, as kube-scheduler counts them. After it, nodes no longer only gain
// pods, so fit cursors must start over.
func (w *world) releaseTerminating() bool {
	released := false
	for _, n := range w.nodes[:w.baseCount] {
		if !n.target || n.gone {
			continue
		}
		if !n.loaded && !w.anyLeaving(n.raw) {
			continue
		}
		w.load(n)
		if n.freeing == nil || n.released {
			continue
		}
		n.used.add(n.freeing.req, -1)
		n.released = true
		released = true
	}
	return released
}

// anyLeaving reports whether one of pods is leaving and not finished.
func (w *world) anyLeaving(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if p == nil || isFinished(p) {
			continue
		}
		if _, ok := LeavingDeadline(p, w.leaving); ok {
			return true
		}
	}
	return false
}

// awaitTermination places, in order, the pods that fit no room that is
// free now on the room terminating pods will free (releaseTerminating);
// those are added to the plan as Schedulable with AwaitsTermination, and
// the pods that still fit nowhere are returned. plan.RecheckAt becomes the
// earliest deadline a placement relies on.
func (w *world) awaitTermination(pods []*podInfo, plan *ScaleUpPlan) []*podInfo {
	if len(pods) == 0 || !w.releaseTerminating() {
		return pods
	}
	w.cursors = map[string]*fitCursor{} // nodes only gain pods again from here
	defer func() { w.cursors = nil }()
	var rest []*podInfo
	for _, pi := range pods {
		n := w.findNode(pi)
		if n == nil {
			rest = append(rest, pi)
			continue
		}
		w.place(pi, n)
		pl := PodPlacement{Pod: pi.pod, Node: n.name, Pool: n.pool, Upcoming: n.upcoming}
		if n.freeing != nil {
			pl.AwaitsTermination = true
			if plan.RecheckAt.IsZero() || n.freeing.until.Before(plan.RecheckAt) {
				plan.RecheckAt = n.freeing.until
			}
		}
		plan.Schedulable = append(plan.Schedulable, pl)
	}
	return rest
}
