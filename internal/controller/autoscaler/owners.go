package autoscaler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// OwnerKinds are the controllers of pods whose deletion the autoscaler
// follows (metadata only): a pod whose controller is of another kind is
// never counted as leaving before it is terminating itself.
var OwnerKinds = []schema.GroupVersionKind{
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "apps", Version: "v1", Kind: "ReplicaSet"},
	{Group: "apps", Version: "v1", Kind: "StatefulSet"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"},
	{Group: "batch", Version: "v1", Kind: "Job"},
	{Group: "batch", Version: "v1", Kind: "CronJob"},
	{Version: "v1", Kind: "ReplicationController"},
}

// goneTTL is how long a deleted controller is remembered: its dependents
// are gone long before (their deadline is their grace period plus
// decide.TerminationMargin after it left).
const goneTTL = 10 * time.Minute

// OwnerWatchWait bounds how long a pending pod whose controllers the
// tracker has not seen yet waits for them before it may grow a pool (see
// UnseenController). The wait normally ends within milliseconds, when the
// tracker sees them; the bound only matters for a controller it never
// sees (remembered no longer, or its watch failing).
const OwnerWatchWait = 5 * time.Second

// isOwnerKind reports whether an owner reference names one of OwnerKinds
// (any version of its group).
func isOwnerKind(ref *metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false
	}
	for _, gvk := range OwnerKinds {
		if gvk.Group == gv.Group && gvk.Kind == ref.Kind {
			return true
		}
	}
	return false
}

// OwnerState is what the autoscaler knows of one controller object.
type OwnerState struct {
	// Controller is the UID of its own controller ("" when it has none).
	Controller types.UID
	// ControllerTracked: Controller is of one of OwnerKinds, so the
	// tracker sees it too (see UnseenController).
	ControllerTracked bool
	// ForegroundSince is set while it is being deleted in the foreground
	// (finalizer foregroundDeletion): the garbage collector deletes its
	// dependents first. It is the time the deletion started.
	ForegroundSince time.Time
	// Orphaning: it was seen being deleted with the orphan finalizer, so
	// its dependents are kept (their owner reference removed). Sticky: it
	// holds after the object is gone.
	Orphaning bool
	// GoneAt is when its deletion was observed; zero while it exists.
	GoneAt time.Time
}

// LeavingOwners returns the controllers whose dependents the garbage
// collector is about to delete, with the time each started leaving
// (pure): a controller that is gone, or being deleted in the foreground,
// or whose own controller is leaving (a ReplicaSet of a deleted
// Deployment), and that is not orphaning its dependents. A controller
// leaves at the earliest of its own time and its controller's. States of
// controllers never seen (their UID is not in owners) count as present.
func LeavingOwners(owners map[types.UID]OwnerState) map[types.UID]time.Time {
	out := map[types.UID]time.Time{}
	const visiting = -1
	seen := map[types.UID]int{} // 0 unvisited, visiting, 1 done
	var resolve func(uid types.UID) (time.Time, bool)
	resolve = func(uid types.UID) (time.Time, bool) {
		st, ok := owners[uid]
		if !ok || st.Orphaning {
			return time.Time{}, false
		}
		switch seen[uid] {
		case visiting: // a cycle of owner references: leave it as it is
			return time.Time{}, false
		case 1:
			t, ok := out[uid]
			return t, ok
		}
		seen[uid] = visiting
		var since time.Time
		for _, t := range []time.Time{st.GoneAt, st.ForegroundSince} {
			if !t.IsZero() && (since.IsZero() || t.Before(since)) {
				since = t
			}
		}
		if st.Controller != "" {
			if t, ok := resolve(st.Controller); ok && (since.IsZero() || t.Before(since)) {
				since = t
			}
		}
		seen[uid] = 1
		if since.IsZero() {
			return time.Time{}, false
		}
		out[uid] = since
		return since, true
	}
	for uid := range owners {
		resolve(uid)
	}
	return out
}

// UnseenController returns the first controller of p's chain of
// controllers (its controller, that one's controller, ...) that is of one
// of OwnerKinds and not in owners, and whether there is one (pure). The
// chain ends at a controller of another kind, which is not followed, or
// at one without a controller.
//
// The tracker watches each kind apart from the pods, and that watch may
// lag the pods': until it has seen a pending pod's controllers, it may not
// have seen the deletion of the ones they replace either (a Deployment
// deleted and created again at once: its new pods are pending before the
// old Deployment is known gone, and the room of its pods looks taken for
// good). One watch delivers a kind's events in the order they happened,
// so once the tracker has seen a new controller it has seen every
// deletion of that kind made before it was created.
func UnseenController(owners map[types.UID]OwnerState, p *corev1.Pod) (types.UID, bool) {
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil || !isOwnerKind(ref) {
		return "", false
	}
	uid := ref.UID
	for range len(OwnerKinds) + 1 { // longer chains are cycles
		st, ok := owners[uid]
		if !ok {
			return uid, true
		}
		if st.Controller == "" || !st.ControllerTracked {
			return "", false
		}
		uid = st.Controller
	}
	return "", false
}

// ownerState returns the state of a live object (pure).
func ownerState(m metav1.Object) OwnerState {
	var st OwnerState
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
		st.Controller = ref.UID
		st.ControllerTracked = isOwnerKind(ref)
	}
	if ts := m.GetDeletionTimestamp(); ts != nil {
		fins := m.GetFinalizers()
		switch {
		case slices.Contains(fins, metav1.FinalizerOrphanDependents):
			st.Orphaning = true
		case slices.Contains(fins, metav1.FinalizerDeleteDependents):
			since := ts.Time
			if g := m.GetDeletionGracePeriodSeconds(); g != nil {
				since = since.Add(-time.Duration(*g) * time.Second)
			}
			st.ForegroundSince = since
		}
	}
	return st
}

// ownerTracker follows the controllers of one tenant's pods through
// metadata informers and remembers those deleted (for goneTTL). Safe for
// concurrent use.
type ownerTracker struct {
	clock clock.PassiveClock
	// seen, when set, is called (outside the lock) when the tracker sees
	// a controller that View found unseen.
	seen func()

	mu     sync.Mutex
	owners map[types.UID]OwnerState
	// awaited are the controllers the last View found unseen.
	awaited map[types.UID]bool
}

// newOwnerTracker returns an empty tracker; seen may be nil (see
// ownerTracker.seen).
func newOwnerTracker(c clock.PassiveClock, seen func()) *ownerTracker {
	return &ownerTracker{clock: c, seen: seen, owners: map[types.UID]OwnerState{}}
}

// watch registers the tracker on c's metadata informers of OwnerKinds;
// it returns once they have synced.
func (o *ownerTracker) watch(ctx context.Context, c cache.Cache) error {
	for _, gvk := range OwnerKinds {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watching %s: %w", gvk.Kind, err)
		}
		if _, err := inf.AddEventHandler(o.handler()); err != nil {
			return fmt.Errorf("watching %s: %w", gvk.Kind, err)
		}
	}
	return nil
}

func (o *ownerTracker) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    o.observe,
		UpdateFunc: func(_, n any) { o.observe(n) },
		DeleteFunc: o.forget,
	}
}

// observe records a live object.
func (o *ownerTracker) observe(obj any) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	st := ownerState(m)
	o.mu.Lock()
	// Orphaning is sticky: the garbage collector removes the finalizer
	// just before the object goes.
	st.Orphaning = st.Orphaning || o.owners[m.GetUID()].Orphaning
	o.owners[m.GetUID()] = st
	awaited := o.awaitedLocked(m.GetUID())
	o.mu.Unlock()
	if awaited {
		o.seen()
	}
}

// awaitedLocked reports, with o.mu held, whether uid, just seen, is one
// the last View found unseen and there is a seen function to call; then
// it forgets what View found (the pass the call wakes looks again).
func (o *ownerTracker) awaitedLocked(uid types.UID) bool {
	if !o.awaited[uid] || o.seen == nil {
		return false
	}
	o.awaited = nil
	return true
}

// forget records a deleted object.
func (o *ownerTracker) forget(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	last := ownerState(m)
	o.mu.Lock()
	st := o.owners[m.GetUID()]
	st.Controller, st.ControllerTracked = last.Controller, last.ControllerTracked
	st.Orphaning = st.Orphaning || last.Orphaning
	st.GoneAt = o.clock.Now()
	o.owners[m.GetUID()] = st
	awaited := o.awaitedLocked(m.GetUID())
	o.mu.Unlock()
	if awaited {
		o.seen()
	}
}

// View returns, from one state of the tracker, LeavingOwners of what it
// knows (see Leaving) and, for each of pending whose chain of controllers
// holds one it has not seen (UnseenController), that controller's UID by
// pod UID. It remembers those: seeing one of them calls the tracker's
// seen function. Both must come from one state: a leaving set read before
// the pods' controllers were seen may miss the deletion they followed.
func (o *ownerTracker) View(pending []*corev1.Pod) (leaving map[types.UID]time.Time, unseen map[types.UID]types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.awaited = nil
	for _, p := range pending {
		if uid, ok := UnseenController(o.owners, p); ok {
			if unseen == nil {
				unseen, o.awaited = map[types.UID]types.UID{}, map[types.UID]bool{}
			}
			unseen[p.UID] = uid
			o.awaited[uid] = true
		}
	}
	return o.leavingLocked(), unseen
}

// Leaving returns LeavingOwners of what the tracker knows, after
// forgetting controllers gone for more than goneTTL.
func (o *ownerTracker) Leaving() map[types.UID]time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.leavingLocked()
}

// leavingLocked is Leaving with o.mu held.
func (o *ownerTracker) leavingLocked() map[types.UID]time.Time {
	now := o.clock.Now()
	departing := false
	for uid, st := range o.owners {
		if !st.GoneAt.IsZero() && now.Sub(st.GoneAt) > goneTTL {
			delete(o.owners, uid)
			continue
		}
		departing = departing || !st.GoneAt.IsZero() || !st.ForegroundSince.IsZero()
	}
	if !departing {
		return nil
	}
	return LeavingOwners(o.owners)
}
