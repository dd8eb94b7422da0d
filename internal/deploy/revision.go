package deploy

import (
	"fmt"
	"slices"
	"time"
)

// RevisionStatus is where an applied revision stands.
type RevisionStatus string

// Revision statuses, as `fke releases` shows them.
const (
	// StatusPending: being applied now (or the apply was interrupted).
	StatusPending RevisionStatus = "pending"
	// StatusDeployed: applied and every object Current; the live revision.
	StatusDeployed RevisionStatus = "deployed"
	// StatusFailed: applied, but not every object became Current.
	StatusFailed RevisionStatus = "failed"
	// StatusSuperseded: was deployed; a later revision replaced it.
	StatusSuperseded RevisionStatus = "superseded"
)

// DefaultHistory is how many revisions of a release are kept.
const DefaultHistory = 10

// Revision is one applied revision of a release.
type Revision struct {
	Release string         `json:"release"`
	Number  int            `json:"revision"`
	Status  RevisionStatus `json:"status"`
	// Digest identifies the source and values that were rendered.
	Digest string `json:"digest"`
	// Source is where it was rendered from (a path, or "rollback to N").
	Source  string     `json:"source"`
	Kind    SourceKind `json:"kind"`
	Objects int        `json:"objects"`
	Applied time.Time  `json:"applied"`
	// Message says why a revision failed, or what it rolled back.
	Message string `json:"message,omitempty"`
}

// NextRevision returns the number the next revision of a release gets
// (pure): one more than the highest so far, 1 for the first.
func NextRevision(revs []Revision) int {
	n := 0
	for _, r := range revs {
		n = max(n, r.Number)
	}
	return n + 1
}

// Latest returns the revision with the highest number, or false.
func Latest(revs []Revision) (Revision, bool) {
	if len(revs) == 0 {
		return Revision{}, false
	}
	return slices.MaxFunc(revs, func(a, b Revision) int { return a.Number - b.Number }), true
}

// RollbackTarget chooses the revision a rollback applies (pure). With to > 0
// it is that revision, which must exist. With to == 0 it is the newest
// revision before the latest one that was healthy (deployed or superseded):
// a rollback after a failed revision returns to the last good one, a
// rollback after a good one to the good one before it.
func RollbackTarget(revs []Revision, to int) (Revision, error) {
	if len(revs) == 0 {
		return Revision{}, fmt.Errorf("no revisions: deploy something first with `fke deploy`")
	}
	sorted := slices.Clone(revs)
	slices.SortFunc(sorted, func(a, b Revision) int { return a.Number - b.Number })
	if to > 0 {
		for _, r := range sorted {
			if r.Number == to {
				return r, nil
			}
		}
		return Revision{}, fmt.Errorf("revision %d not found: release %s has revisions %s", to, sorted[0].Release, numbers(sorted))
	}
	latest := sorted[len(sorted)-1]
	for i := len(sorted) - 2; i >= 0; i-- {
		if r := sorted[i]; r.Status == StatusDeployed || r.Status == StatusSuperseded {
			return r, nil
		}
	}
	return Revision{}, fmt.Errorf("release %s has no healthy revision before %d to roll back to (revisions %s)", latest.Release, latest.Number, numbers(sorted))
}

func numbers(revs []Revision) string {
	s := ""
	for i, r := range revs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(r.Number)
	}
	return s
}

// StatusChanges returns the new status of the other revisions once
// revision n ends with status s (pure): when n is deployed, the revision
// that was deployed before is superseded; a failed one changes nothing.
func StatusChanges(revs []Revision, n int, s RevisionStatus) map[int]RevisionStatus {
	if s != StatusDeployed {
		return nil
	}
	out := map[int]RevisionStatus{}
	for _, r := range revs {
		if r.Number != n && r.Status == StatusDeployed {
			out[r.Number] = StatusSuperseded
		}
	}
	return out
}

// Expired returns the revisions to delete so that at most keep remain
// (pure): the oldest first, never the latest nor the deployed one.
func Expired(revs []Revision, keep int) []int {
	if keep <= 0 || len(revs) <= keep {
		return nil
	}
	sorted := slices.Clone(revs)
	slices.SortFunc(sorted, func(a, b Revision) int { return a.Number - b.Number })
	latest := sorted[len(sorted)-1].Number
	var out []int
	excess := len(sorted) - keep
	for _, r := range sorted {
		if excess == 0 {
			break
		}
		if r.Number == latest || r.Status == StatusDeployed {
			continue
		}
		out = append(out, r.Number)
		excess--
	}
	return out
}
