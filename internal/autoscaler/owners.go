package autoscaler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

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

// OwnerState is what the autoscaler knows of one controller object.
type OwnerState struct {
	// Controller is the UID of its own controller ("" when it has none).
	Controller types.UID
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

// ownerState returns the state of a live object (pure).
func ownerState(m metav1.Object) OwnerState {
	var st OwnerState
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
		st.Controller = ref.UID
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

	mu     sync.Mutex
	owners map[types.UID]OwnerState
}

func newOwnerTracker(c clock.PassiveClock) *ownerTracker {
	return &ownerTracker{clock: c, owners: map[types.UID]OwnerState{}}
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
	defer o.mu.Unlock()
	// Orphaning is sticky: the garbage collector removes the finalizer
	// just before the object goes.
	st.Orphaning = st.Orphaning || o.owners[m.GetUID()].Orphaning
	o.owners[m.GetUID()] = st
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
	defer o.mu.Unlock()
	st := o.owners[m.GetUID()]
	st.Controller = last.Controller
	st.Orphaning = st.Orphaning || last.Orphaning
	st.GoneAt = o.clock.Now()
	o.owners[m.GetUID()] = st
}

// Leaving returns LeavingOwners of what the tracker knows, after
// forgetting controllers gone for more than goneTTL.
func (o *ownerTracker) Leaving() map[types.UID]time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
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
