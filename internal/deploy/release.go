package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Deployer applies releases and keeps their revisions.
type Deployer struct {
	Cluster *Cluster
	// History is how many revisions a release keeps; 0 means DefaultHistory.
	History int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Request is one deploy of a release.
type Request struct {
	Options
	Rendered *Rendered
	// Source says where it was rendered from, for `fke releases`.
	Source string
	// RollbackOnFailure applies the last healthy revision again (with
	// prune) when this one does not become ready; when the release has no
	// healthy revision (a first deploy), it removes what the failed
	// revisions created instead.
	RollbackOnFailure bool
}

// Outcome is what Deploy or Rollback did.
type Outcome struct {
	Result *Result `json:"result"`
	// Revision is the revision recorded (0 for a dry run).
	Revision int `json:"revision,omitempty"`
	// RolledBack is the revision of the rollback --rollback-on-failure made
	// (0 when none), and RolledBackTo the revision it applied again.
	RolledBack   int `json:"rolledBack,omitempty"`
	RolledBackTo int `json:"rolledBackTo,omitempty"`
	// Removed lists what --rollback-on-failure deleted when there was no
	// healthy revision to return to, and Kept the objects of the source
	// that existed before the release had them (left in place).
	Removed []string `json:"removed,omitempty"`
	Kept    []string `json:"kept,omitempty"`
}

// ValidateRelease checks a release name: it names a ConfigMap and Secrets.
func ValidateRelease(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 || len(name) > 50 {
		return fmt.Errorf("invalid release name %q: use at most 50 lowercase letters, digits and '-' (--name)", name)
	}
	return nil
}

func (d *Deployer) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func (d *Deployer) store() Store { return Store{Client: d.Cluster.Client} }

// Deploy applies req and records it as a new revision (not for a dry run).
// When the objects do not become ready it returns the NotReadyError; with
// RollbackOnFailure it first applies the last healthy revision again and
// says so in the error.
func (d *Deployer) Deploy(ctx context.Context, req Request) (*Outcome, error) {
	if err := ValidateRelease(req.Release); err != nil {
		return nil, err
	}
	if req.DryRun {
		res, err := d.Cluster.Apply(ctx, req.Rendered.Objects, req.Options)
		return &Outcome{Result: res}, err
	}
	revs, err := d.store().List(ctx, req.Release)
	if err != nil {
		return nil, err
	}
	// Without a healthy revision, a rollback removes what this deploy
	// creates: note first what exists that the release does not own.
	var foreign []*unstructured.Unstructured
	if req.RollbackOnFailure && !HasHealthy(revs) {
		if foreign, err = d.Cluster.foreign(ctx, req.Rendered.Objects, req.Namespace); err != nil {
			return nil, err
		}
	}
	rev := Revision{
		Release: req.Release, Number: NextRevision(revs), Status: StatusPending,
		Digest: req.Rendered.Digest, Source: req.Source, Kind: req.Rendered.Kind,
		Objects: len(req.Rendered.Objects), Applied: d.now(),
	}
	out, applyErr := d.applyRevision(ctx, revs, rev, req.Rendered.Objects, req.Options)
	if applyErr == nil || !req.RollbackOnFailure {
		return out, applyErr
	}
	var notReady *NotReadyError
	if !errors.As(applyErr, &notReady) {
		return out, applyErr
	}
	revs, err = d.store().List(ctx, req.Release)
	if err != nil {
		return out, errors.Join(applyErr, err)
	}
	if !HasHealthy(revs) {
		return d.remove(ctx, req, out, applyErr, foreign)
	}
	target, err := RollbackTarget(revs, 0)
	if err != nil {
		return out, fmt.Errorf("%w\nno rollback: %v", applyErr, err)
	}
	if req.Progress != nil {
		req.Progress(Progress{Object: "release " + req.Release, Action: "rollback", Message: fmt.Sprintf("to revision %d", target.Number)})
	}
	rb, err := d.rollback(ctx, revs, target, req.Options)
	if err != nil {
		return out, fmt.Errorf("%w\nrollback to revision %d failed: %v", applyErr, target.Number, err)
	}
	out.RolledBack, out.RolledBackTo = rb.Revision, target.Number
	return out, fmt.Errorf("%w\nrolled back to revision %d (recorded as revision %d)", applyErr, target.Number, rb.Revision)
}

// remove is --rollback-on-failure without a healthy revision to return
// to: it prunes the release's inventory down to the objects of the source
// that existed before the release had them (foreign; they stay, as the
// failed deploy left them), so a failed first deploy leaves nothing
// half-made. The failed revision stays recorded.
func (d *Deployer) remove(ctx context.Context, req Request, out *Outcome, applyErr error, foreign []*unstructured.Unstructured) (*Outcome, error) {
	if req.Progress != nil {
		req.Progress(Progress{Object: "release " + req.Release, Action: "rollback", Message: "no healthy revision to return to: removing what this deploy created"})
	}
	// Its own context: a deploy cut short by its timeout still cleans up.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	res, err := d.Cluster.Apply(rctx, foreign, Options{Release: req.Release, Namespace: req.Namespace, Prune: true, Progress: req.Progress})
	if res != nil {
		for _, o := range res.Objects {
			switch o.Action {
			case "pruned":
				out.Removed = append(out.Removed, o.Object)
			case "applied", "unchanged":
				out.Kept = append(out.Kept, o.Object)
			}
		}
	}
	if err != nil {
		return out, fmt.Errorf("%w\nno healthy revision to return to, and removing what this deploy created failed: %v", applyErr, err)
	}
	if out.Revision > 0 {
		note := "removed (no healthy revision to return to): " + firstLine(applyErr)
		if err := d.store().SetStatus(rctx, req.Release, out.Revision, StatusFailed, note); err != nil {
			return out, errors.Join(applyErr, err)
		}
	}
	msg := fmt.Sprintf("%v\nno healthy revision to return to: removed the %d object(s) this deploy created", applyErr, len(out.Removed))
	if len(out.Kept) > 0 {
		msg += fmt.Sprintf("; kept %d that existed before it, as it left them: %s", len(out.Kept), strings.Join(out.Kept, ", "))
	}
	return out, &RemovedError{Err: applyErr, msg: msg}
}

// RemovedError is a failed deploy whose objects --rollback-on-failure
// removed, there being no healthy revision to return to.
type RemovedError struct {
	Err error
	msg string
}

func (e *RemovedError) Error() string { return e.msg }
func (e *RemovedError) Unwrap() error { return e.Err }

// HasHealthy reports whether a release has a revision that became ready
// (pure): one a rollback can return to.
func HasHealthy(revs []Revision) bool {
	for _, r := range revs {
		if r.Status == StatusDeployed || r.Status == StatusSuperseded {
			return true
		}
	}
	return false
}

// Rollback applies revision to (0: the last healthy one before the latest,
// see RollbackTarget) again, with prune, as a new revision.
func (d *Deployer) Rollback(ctx context.Context, release string, to int, opts Options) (*Outcome, error) {
	revs, err := d.store().List(ctx, release)
	if err != nil {
		return nil, err
	}
	if len(revs) == 0 {
		return nil, fmt.Errorf("release %s has no revisions in this cluster: list them with `fke releases`", release)
	}
	target, err := RollbackTarget(revs, to)
	if err != nil {
		return nil, err
	}
	return d.rollback(ctx, revs, target, opts)
}

func (d *Deployer) rollback(ctx context.Context, revs []Revision, target Revision, opts Options) (*Outcome, error) {
	objs, err := d.store().Objects(ctx, target.Release, target.Number)
	if err != nil {
		return nil, err
	}
	opts.Release, opts.Prune = target.Release, true
	rev := Revision{
		Release: target.Release, Number: NextRevision(revs), Status: StatusPending,
		Digest: target.Digest, Source: fmt.Sprintf("rollback to %d (%s)", target.Number, target.Source), Kind: target.Kind,
		Objects: len(objs), Applied: d.now(),
	}
	return d.applyRevision(ctx, revs, rev, objs, opts)
}

// applyRevision records rev as pending, applies objs and records how it
// ended, superseding the revision deployed before and expiring old ones.
func (d *Deployer) applyRevision(ctx context.Context, revs []Revision, rev Revision, objs []*unstructured.Unstructured, opts Options) (*Outcome, error) {
	st := d.store()
	if err := st.Create(ctx, rev, objs); err != nil {
		return nil, err
	}
	res, applyErr := d.Cluster.Apply(ctx, objs, opts)
	out := &Outcome{Result: res, Revision: rev.Number}
	rev.Status, rev.Message = StatusDeployed, ""
	if applyErr != nil {
		rev.Status, rev.Message = StatusFailed, firstLine(applyErr)
	}
	// Recording uses its own context: a deploy cut short by its timeout
	// still says how it ended.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := st.SetStatus(rctx, rev.Release, rev.Number, rev.Status, rev.Message); err != nil {
		return out, errors.Join(applyErr, err)
	}
	all := append(revs, rev)
	for n, s := range StatusChanges(all, rev.Number, rev.Status) {
		for i := range all {
			if all[i].Number == n {
				all[i].Status = s
			}
		}
		if err := st.SetStatus(rctx, rev.Release, n, s, ""); err != nil {
			return out, errors.Join(applyErr, err)
		}
	}
	history := d.History
	if history == 0 {
		history = DefaultHistory
	}
	for _, n := range Expired(all, history) {
		if err := st.Delete(rctx, rev.Release, n); err != nil {
			return out, errors.Join(applyErr, err)
		}
	}
	return out, applyErr
}

func firstLine(err error) string {
	var nr *NotReadyError
	if errors.As(err, &nr) && len(nr.Lines) > 0 {
		return nr.Lines[0]
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
