package deploy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/apply/event"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// run is the state of one Apply: what each object went through.
type run struct {
	c       *Cluster
	opts    Options
	applied []*unstructured.Unstructured

	mu      sync.Mutex
	results map[object.ObjMetadata]*ObjectResult
	order   []object.ObjMetadata
	// waiting holds the objects applied but not yet Current, with their
	// last known state, for the problem watcher.
	waiting map[object.ObjMetadata]*unstructured.Unstructured
	// told are the problems already reported per object, in order.
	told map[object.ObjMetadata][]string

	// final counts the checks that saw each final problem; stopRun ends
	// the apply's wait once one was seen often enough, and gaveUp says
	// why (nil while waiting).
	final   finalTracker
	stopRun func()
	started time.Time
	gaveUp  *GaveUp
}

// GaveUp says why a deploy stopped waiting before its timeout.
type GaveUp struct {
	// Object is the object with the final problem, and Reason the problem.
	Object string `json:"object"`
	Reason string `json:"reason"`
	// After is how long the deploy had waited.
	After time.Duration `json:"after"`
}

func (r *run) result(id object.ObjMetadata) *ObjectResult {
	res, ok := r.results[id]
	if !ok {
		res = &ObjectResult{Object: idName(id)}
		r.results[id] = res
		r.order = append(r.order, id)
	}
	return res
}

func (r *run) progress(p Progress) {
	if r.opts.Progress != nil {
		r.opts.Progress(p)
	}
}

// handle records one event of the cli-utils applier; an error event stops
// the apply.
func (r *run) handle(ctx context.Context, ev event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch ev.Type {
	case event.ErrorType:
		return explainApplyError(ev.ErrorEvent.Err)
	case event.ApplyType:
		r.applyEvent(ctx, ev.ApplyEvent)
	case event.StatusType:
		r.status(ev.StatusEvent)
	case event.WaitType:
		r.waited(ev.WaitEvent)
	case event.PruneType:
		r.pruned(ev.PruneEvent)
	}
	return nil
}

// applyEvent records that an object was applied (or would be, in a dry
// run: with its diff), failed or was skipped.
func (r *run) applyEvent(ctx context.Context, e event.ApplyEvent) {
	res := r.result(e.Identifier)
	switch e.Status {
	case event.ApplySuccessful:
		res.Action = "applied"
		if r.opts.DryRun {
			res.Planned = e.Resource
			res.Action, res.Diff = r.diff(ctx, e.Identifier, e.Resource)
		} else if r.opts.Wait {
			r.setWaiting(e.Identifier, e.Resource)
		}
		r.progress(Progress{Object: res.Object, Action: res.Action})
	case event.ApplyFailed:
		if r.opts.DryRun && newParent(e.Error, r.applied) {
			res.Action, res.Planned = "created", r.rendered(e.Identifier)
			res.Diff = "(checked once its namespace or CRD, new in this source, exists)"
			r.progress(Progress{Object: res.Object, Action: res.Action})
			break
		}
		res.Action, res.Error = "failed", applyErrorMessage(e.Error)
		r.progress(Progress{Object: res.Object, Action: "failed", Message: res.Error})
	case event.ApplySkipped:
		res.Action, res.Error = "skipped", applyErrorMessage(e.Error)
		r.progress(Progress{Object: res.Object, Action: "skipped", Message: res.Error})
	}
}

// status records an object's kstatus; Current ends its wait (a Job's ends
// in waitJobs).
func (r *run) status(e event.StatusEvent) {
	if e.PollResourceInfo == nil {
		return
	}
	res := r.result(e.Identifier)
	prev := res.Status
	res.Status = e.PollResourceInfo.Status.String()
	if e.Resource != nil && r.waiting != nil {
		if _, ok := r.waiting[e.Identifier]; ok {
			r.waiting[e.Identifier] = e.Resource
		}
	}
	if res.Status == status.CurrentStatus.String() && prev != res.Status && r.isWaiting(e.Identifier) && !isJob(e.Identifier) {
		delete(r.waiting, e.Identifier)
		r.progress(Progress{Object: res.Object, Action: "ready"})
	}
}

// waited records the end of cli-utils' wait for an object.
func (r *run) waited(e event.WaitEvent) {
	res := r.result(e.Identifier)
	switch e.Status {
	case event.ReconcileSuccessful:
		if r.isWaiting(e.Identifier) && !isJob(e.Identifier) {
			delete(r.waiting, e.Identifier)
			res.Status = status.CurrentStatus.String()
			r.progress(Progress{Object: res.Object, Action: "ready"})
		}
	case event.ReconcileFailed, event.ReconcileTimeout:
		if res.Status == "" || res.Status == status.CurrentStatus.String() {
			res.Status = e.Status.String()
		}
	}
}

// pruned records an object pruned, kept or that failed to go.
func (r *run) pruned(e event.PruneEvent) {
	res := r.result(e.Identifier)
	switch e.Status {
	case event.PruneSuccessful:
		res.Action = "pruned"
		if r.opts.DryRun {
			res.Planned = e.Object
		}
		r.progress(Progress{Object: res.Object, Action: "pruned"})
	case event.PruneFailed:
		res.Action, res.Error = "failed", "pruning: "+applyErrorMessage(e.Error)
		r.progress(Progress{Object: res.Object, Action: "failed", Message: res.Error})
	case event.PruneSkipped:
		res.Action = "kept"
		if e.Error != nil {
			res.Error = e.Error.Error()
		}
	}
}

// rendered returns the applied object with id.
func (r *run) rendered(id object.ObjMetadata) *unstructured.Unstructured {
	for _, o := range r.applied {
		if object.UnstructuredToObjMetadata(o) == id {
			return o
		}
	}
	return nil
}

func (r *run) setWaiting(id object.ObjMetadata, obj *unstructured.Unstructured) {
	if r.waiting == nil {
		r.waiting, r.told = map[object.ObjMetadata]*unstructured.Unstructured{}, map[object.ObjMetadata][]string{}
	}
	r.waiting[id] = obj
}

func (r *run) isWaiting(id object.ObjMetadata) bool {
	_, ok := r.waiting[id]
	return ok
}

// isJob reports whether id is a batch Job.
func isJob(id object.ObjMetadata) bool {
	return id.GroupKind.Group == "batch" && id.GroupKind.Kind == "Job"
}

// waitJobs waits, until ctx ends, for the Jobs applied to complete. kstatus
// calls a Job that has started Current, so cli-utils stops waiting for it
// there; a deploy (like a Helm hook) waits until the Job has run: a
// migration that fails fails the deploy.
func (r *run) waitJobs(ctx context.Context) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		r.mu.Lock()
		var jobs []object.ObjMetadata
		for id := range r.waiting {
			if isJob(id) {
				jobs = append(jobs, id)
			}
		}
		r.mu.Unlock()
		open := 0
		for _, id := range jobs {
			obj, err := r.c.live(ctx, id)
			if err != nil || obj == nil {
				open++
				continue
			}
			if c := findCondition(obj, "Complete"); c != nil && c["status"] == "True" {
				r.mu.Lock()
				delete(r.waiting, id)
				res := r.result(id)
				res.Status = status.CurrentStatus.String()
				r.progress(Progress{Object: res.Object, Action: "ready"})
				r.mu.Unlock()
				continue
			}
			if c := findCondition(obj, "Failed"); c != nil && c["status"] == "True" {
				continue // finish explains it
			}
			open++
		}
		if open == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// giveUp ends the wait: a problem that waiting will not cure decides the
// deploy now rather than at the timeout. Called with r.mu held.
func (r *run) giveUp(object, reason string) {
	r.gaveUp = &GaveUp{Object: object, Reason: reason, After: time.Since(r.started).Round(100 * time.Millisecond)}
	r.progress(Progress{Object: object, Action: "failed", Message: reason + " (final: not waiting for the timeout)"})
	if r.stopRun != nil {
		r.stopRun()
	}
}

// stopped reports whether the run gave up waiting.
func (r *run) stopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gaveUp != nil
}

// watchProblems looks every two seconds at the pods of the objects not yet
// Current and reports each new problem once (an image that cannot be
// pulled, a crash loop, a pod no node can take), so a user sees why before
// the timeout; a final problem (see Problem) seen on FinalChecks checks
// ends the wait (giveUp).
func (r *run) watchProblems(ctx context.Context) (stop func()) {
	if !r.opts.Wait || r.opts.DryRun {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			r.mu.Lock()
			pending := map[object.ObjMetadata]*unstructured.Unstructured{}
			for id, o := range r.waiting {
				pending[id] = o
			}
			r.mu.Unlock()
			for id, obj := range pending {
				problems := r.c.assess(ctx, obj)
				r.mu.Lock()
				if r.isWaiting(id) {
					for _, p := range problems {
						if !slices.Contains(r.told[id], p.Text) {
							r.told[id] = append(r.told[id], p.Text)
							r.progress(Progress{Object: idName(id), Action: "problem", Message: p.Text})
						}
					}
					if final := r.final.observe(idName(id), problems); len(final) > 0 && r.gaveUp == nil {
						r.giveUp(idName(id), final[0].Text)
					}
				}
				r.mu.Unlock()
			}
		}
	}()
	return func() { cancel(); <-done }
}

// finish reads the final state of the objects that are not Current,
// explains them, and returns the result.
func (r *run) finish(ctx context.Context) (*Result, error) {
	res := &Result{Ready: true}
	var lines []string
	for _, id := range r.order {
		o := r.results[id]
		if o.Action == "failed" || o.Action == "skipped" {
			res.Ready = false
			lines = append(lines, fmt.Sprintf("%s: %s", o.Object, o.Error))
		}
		if r.opts.Wait && !r.opts.DryRun && r.isWaiting(id) {
			r.explain(ctx, id, o)
			if o.Status == status.CurrentStatus.String() && !isJob(id) {
				// Current now, though the wait never heard it: the
				// status watch of a kind this apply created (its CRD in
				// the same source) can miss the object's events.
				delete(r.waiting, id)
				o.Problems = nil
				r.progress(Progress{Object: o.Object, Action: "ready"})
			} else {
				res.Ready = false
				lines = append(lines, fmt.Sprintf("%s (%s): %s", o.Object, o.Status, strings.Join(o.Problems, "; ")))
			}
		}
		res.Objects = append(res.Objects, *o)
	}
	res.GaveUp = r.gaveUp
	if !res.Ready {
		return res, &NotReadyError{Lines: lines, GaveUp: r.gaveUp}
	}
	return res, nil
}

// explain fills in why an object is not Current: what its pods and events
// show now; else the last problem seen while waiting (a crash-looping
// container may be running between two crashes); else kstatus' message.
func (r *run) explain(ctx context.Context, id object.ObjMetadata, o *ObjectResult) {
	obj, err := r.c.live(ctx, id)
	if err != nil {
		o.Problems = []string{fmt.Sprintf("not readable after %s: %v", r.opts.Timeout, err)}
		return
	}
	if obj == nil {
		o.Problems = []string{"deleted while waiting for it"}
		return
	}
	st, err := status.Compute(obj)
	if err != nil {
		o.Problems = []string{fmt.Sprintf("status unknown: %v", err)}
		return
	}
	o.Status = st.Status.String()
	o.Problems = r.c.diagnose(ctx, obj)
	if told := r.told[id]; len(o.Problems) == 0 && len(told) > 0 {
		o.Problems = []string{told[len(told)-1]}
	}
	if len(o.Problems) == 0 && st.Message != "" {
		o.Problems = []string{st.Message}
	}
	if len(o.Problems) == 0 && r.gaveUp != nil {
		o.Problems = []string{"not Current after " + r.gaveUp.After.String()}
	}
	if len(o.Problems) == 0 {
		o.Problems = []string{"not Current after " + r.opts.Timeout.String()}
	}
}
