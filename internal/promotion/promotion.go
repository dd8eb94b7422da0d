// Package promotion decides which revision each stage of a Release runs:
// the first stage follows the source, each later stage takes the revision
// the stage before it has been healthy with for the stage's soak time (and
// approved, when the stage asks for approval). A revision that failed in a
// stage is rolled back there and never handed on.
//
// The code is pure: plain values in, decisions out, the clock passed in.
package promotion

import (
	"fmt"
	"time"
)

// Stage is what the decision needs to know of one stage.
type Stage struct {
	Name string
	// Soak is how long the previous stage must have been healthy with a
	// revision before this stage gets it.
	Soak time.Duration
	// RequireApproval holds a revision until Approved names it.
	RequireApproval bool
	Approved        string

	// Revision is what the stage runs now (or is being moved to); "" when
	// nothing was applied yet.
	Revision string
	// Healthy is true when every target runs Revision and is Current, and
	// HealthySince says since when.
	Healthy      bool
	HealthySince time.Time
	// HealthyRevision is the last revision the stage was healthy with, and
	// PreviousHealthyRevision the one it was healthy with before.
	HealthyRevision         string
	PreviousHealthyRevision string
	// FailedRevision failed here: it is not tried again.
	FailedRevision string
}

// Input is the state of a Release.
type Input struct {
	// Source is the newest commit of the source that rendered ("" when
	// none yet).
	Source    string
	Now       time.Time
	Suspended bool
	Stages    []Stage
}

// Decision is what one stage should run.
type Decision struct {
	Stage string
	// Revision is what the stage should run; when it differs from the
	// stage's Revision the stage is synced to it.
	Revision string
	// Pending is the revision the stage would get next but does not yet,
	// and Waiting says why; both "" when nothing waits.
	Pending string
	Waiting string
	// After, when positive, is when to look again (a soak ending).
	After time.Duration
}

// Changed reports whether the stage must be synced.
func (d Decision) Changed(s Stage) bool { return d.Revision != s.Revision }

// Decide returns one decision per stage, in order.
func Decide(in Input) []Decision {
	out := make([]Decision, len(in.Stages))
	for i, s := range in.Stages {
		d := Decision{Stage: s.Name, Revision: s.Revision}
		next, blocked, after := offered(in, i)
		switch {
		case next == "":
			d.Waiting = blocked
		case next == s.Revision:
		case next == s.FailedRevision:
			d.Waiting = fmt.Sprintf("revision %s failed in this stage and was rolled back; waiting for a new revision", Short(next))
		case blocked != "":
			d.Pending, d.Waiting, d.After = next, blocked, after
		case s.RequireApproval && s.Approved != next:
			d.Pending, d.Waiting = next, fmt.Sprintf("revision %s waits for approval (fke release approve NAME --stage %s)", Short(next), s.Name)
		case in.Suspended:
			d.Pending, d.Waiting = next, "suspended"
		default:
			d.Revision = next
		}
		out[i] = d
	}
	return out
}

// offered returns the revision that stage i follows and, when it may not
// take it yet, why (with when to look again).
func offered(in Input, i int) (next, blocked string, after time.Duration) {
	if i == 0 {
		if in.Source == "" {
			return "", "no revision of the source has rendered yet", 0
		}
		return in.Source, "", 0
	}
	prev, s := in.Stages[i-1], in.Stages[i]
	if prev.Revision == "" {
		return "", fmt.Sprintf("stage %s has no revision yet", prev.Name), 0
	}
	if prev.Revision == prev.FailedRevision {
		// It failed there and nothing healthier was left to go back to.
		return "", fmt.Sprintf("revision %s failed in stage %s; waiting for a new revision", Short(prev.Revision), prev.Name), 0
	}
	if !prev.Healthy {
		return prev.Revision, fmt.Sprintf("waiting for stage %s to be healthy with %s", prev.Name, Short(prev.Revision)), 0
	}
	if healthyFor := in.Now.Sub(prev.HealthySince); healthyFor < s.Soak {
		return prev.Revision, fmt.Sprintf("revision %s soaks in stage %s: healthy for %s of %s", Short(prev.Revision), prev.Name, healthyFor.Truncate(time.Second), s.Soak), s.Soak - healthyFor
	}
	return prev.Revision, "", 0
}

// Rollback says where a stage goes when a sync to failed did not become
// healthy: its last healthy revision (ok false when it never had one, or
// it is the failed one).
func Rollback(s Stage, failed string) (to string, ok bool) {
	if s.HealthyRevision == "" || s.HealthyRevision == failed {
		return "", false
	}
	return s.HealthyRevision, true
}

// Target is what the regression check needs of one target of a stage.
type Target struct {
	Cluster string
	// Revision is what the target runs.
	Revision string
	// UnhealthySince is when the target's objects stopped being Current;
	// zero while they are, or while they cannot be read.
	UnhealthySince time.Time
}

// Regression is what to do about a stage whose targets turned unhealthy
// with a revision the stage had been healthy with.
type Regression struct {
	// Failed is the revision that turned unhealthy for longer than the
	// timeout: it is not promoted further. "" when nothing is to do.
	Failed string
	// To is where the stage goes back to (its previous healthy revision);
	// "" when it has none, and then it stays where it is.
	To string
	// Targets are the clusters unhealthy past the timeout.
	Targets []string
	// After, when positive, is when to look again (a timeout ending).
	After time.Duration
}

// Regressed decides whether stage s, healthy with its revision once,
// must roll back because a target running it has been unhealthy for
// longer than timeout. A stage that never was healthy with its revision
// is left to the sync's own rollback; a revision that already failed here
// is not judged twice.
func Regressed(s Stage, targets []Target, timeout time.Duration, now time.Time) Regression {
	var out Regression
	if s.Revision == "" || s.HealthyRevision != s.Revision || s.Revision == s.FailedRevision {
		return out
	}
	for _, t := range targets {
		if t.Revision != s.Revision || t.UnhealthySince.IsZero() {
			continue
		}
		if left := timeout - now.Sub(t.UnhealthySince); left > 0 {
			if out.After == 0 || left < out.After {
				out.After = left
			}
			continue
		}
		out.Targets = append(out.Targets, t.Cluster)
	}
	if len(out.Targets) == 0 {
		return out
	}
	out.Failed, out.After = s.Revision, 0
	if to := s.PreviousHealthyRevision; to != "" && to != s.Revision && to != s.FailedRevision {
		out.To = to
	}
	return out
}

// Short is a commit hash cut to 12 characters, as status lines show it.
func Short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
