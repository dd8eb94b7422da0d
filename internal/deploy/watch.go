package deploy

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	pollevent "sigs.k8s.io/cli-utils/pkg/kstatus/polling/event"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/cli-utils/pkg/kstatus/watcher"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// RereadInterval is how often a deploy reads again the objects the status
// watch has not reported.
const RereadInterval = 2 * time.Second

// rereadingWatcher is cli-utils' status watcher with a fallback: every
// interval it reads the objects the watch has not reported yet and reports
// their status itself, until the watch does. The watch of a kind whose CRD
// the same apply creates can only start once the CRD exists, and can miss
// its objects' events; without the fallback the wait for them would last
// until the timeout.
type rereadingWatcher struct {
	inner watcher.StatusWatcher
	// read returns an object's current state, nil when it does not exist.
	read     func(ctx context.Context, id object.ObjMetadata) (*unstructured.Unstructured, error)
	interval time.Duration
}

var _ watcher.StatusWatcher = (*rereadingWatcher)(nil)

// Watch passes the inner watch's events on and, once it has synced, adds
// an event for each unreported object whose status changed since the
// last re-read. The channel closes once the inner one has.
func (w *rereadingWatcher) Watch(ctx context.Context, ids object.ObjMetadataSet, opts watcher.Options) <-chan pollevent.Event {
	in := w.inner.Watch(ctx, ids, opts)
	out := make(chan pollevent.Event)
	go func() {
		defer close(out)
		rs := newRereads(ids)
		tick := time.NewTicker(w.interval)
		defer tick.Stop()
		synced := false
		send := func(ev pollevent.Event) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			select {
			case ev, ok := <-in:
				if !ok {
					return
				}
				switch ev.Type {
				case pollevent.SyncEvent:
					synced = true
				case pollevent.ResourceUpdateEvent:
					rs.reported(ev.Resource)
				}
				if !send(ev) {
					for range in {
					}
					return
				}
			case <-tick.C:
				if !synced {
					continue
				}
				for _, id := range rs.due() {
					obj, err := w.read(ctx, id)
					if err != nil || obj == nil {
						// Not there yet (applied later, or its kind not
						// served yet): the next round tries again.
						continue
					}
					ev, ok := rs.reread(id, obj)
					if ok && !send(ev) {
						for range in {
						}
						return
					}
				}
			}
		}
	}()
	return out
}

// rereads is the bookkeeping of rereadingWatcher (no I/O): which objects
// the watch has reported, and the status last reported for the others.
type rereads struct {
	order []object.ObjMetadata
	seen  map[object.ObjMetadata]bool
	last  map[object.ObjMetadata]status.Status
}

func newRereads(ids object.ObjMetadataSet) *rereads {
	return &rereads{order: ids, seen: map[object.ObjMetadata]bool{}, last: map[object.ObjMetadata]status.Status{}}
}

// reported notes an event of the watch: an object it reported with its
// state needs no re-read any more.
func (r *rereads) reported(rs *pollevent.ResourceStatus) {
	if rs != nil && rs.Resource != nil {
		r.seen[rs.Identifier] = true
	}
}

// due returns the objects to read again, in the order given.
func (r *rereads) due() []object.ObjMetadata {
	var out []object.ObjMetadata
	for _, id := range r.order {
		if !r.seen[id] {
			out = append(out, id)
		}
	}
	return out
}

// reread computes obj's status and returns the event that reports it,
// false when the watch reported the object meanwhile or the status is the
// one last reported.
func (r *rereads) reread(id object.ObjMetadata, obj *unstructured.Unstructured) (pollevent.Event, bool) {
	if r.seen[id] {
		return pollevent.Event{}, false
	}
	st, err := status.Compute(obj)
	if err != nil {
		return pollevent.Event{}, false
	}
	if last, ok := r.last[id]; ok && last == st.Status {
		return pollevent.Event{}, false
	}
	r.last[id] = st.Status
	return pollevent.Event{Type: pollevent.ResourceUpdateEvent, Resource: &pollevent.ResourceStatus{
		Identifier: id, Status: st.Status, Resource: obj, Message: st.Message,
	}}, true
}

// statusWatcher is the watcher an Apply waits with: cli-utils' own, with
// the re-read fallback.
func (c *Cluster) statusWatcher() watcher.StatusWatcher {
	return &rereadingWatcher{
		inner:    watcher.NewDefaultStatusWatcher(c.Dynamic, c.Mapper),
		interval: RereadInterval,
		// A kind whose CRD this apply brings is mapped once discovery
		// serves it (crdMapper).
		read: c.live,
	}
}
