package promotion

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func TestDecide(t *testing.T) {
	t.Parallel()
	dev := func(mut func(*Stage)) Stage {
		s := Stage{Name: "dev"}
		if mut != nil {
			mut(&s)
		}
		return s
	}
	prod := func(mut func(*Stage)) Stage {
		s := Stage{Name: "prod", Soak: time.Minute}
		if mut != nil {
			mut(&s)
		}
		return s
	}
	healthy := func(rev string, since time.Time) func(*Stage) {
		return func(s *Stage) {
			s.Revision, s.Healthy, s.HealthySince, s.HealthyRevision = rev, true, since, rev
		}
	}
	type want struct {
		rev, pending, waiting string
		after                 time.Duration
	}
	cases := []struct {
		name string
		in   Input
		want []want
	}{
		{
			name: "nothing rendered yet",
			in:   Input{Now: t0, Stages: []Stage{dev(nil), prod(nil)}},
			want: []want{{waiting: "no revision of the source"}, {waiting: "stage dev has no revision yet"}},
		},
		{
			name: "first commit goes to dev only",
			in:   Input{Source: "a1", Now: t0, Stages: []Stage{dev(nil), prod(nil)}},
			want: []want{{rev: "a1"}, {waiting: "stage dev has no revision yet"}},
		},
		{
			name: "dev syncing: prod waits for it to be healthy",
			in:   Input{Source: "a1", Now: t0, Stages: []Stage{dev(func(s *Stage) { s.Revision = "a1" }), prod(nil)}},
			want: []want{{rev: "a1"}, {pending: "a1", waiting: "waiting for stage dev to be healthy with a1"}},
		},
		{
			name: "dev healthy, soaking",
			in:   Input{Source: "a1", Now: t0.Add(20 * time.Second), Stages: []Stage{dev(healthy("a1", t0)), prod(nil)}},
			want: []want{{rev: "a1"}, {pending: "a1", waiting: "soaks in stage dev: healthy for 20s of 1m0s", after: 40 * time.Second}},
		},
		{
			name: "soaked: prod gets it",
			in:   Input{Source: "a1", Now: t0.Add(time.Minute), Stages: []Stage{dev(healthy("a1", t0)), prod(nil)}},
			want: []want{{rev: "a1"}, {rev: "a1"}},
		},
		{
			name: "new commit: dev moves, prod keeps the old one",
			in:   Input{Source: "b2", Now: t0.Add(time.Hour), Stages: []Stage{dev(healthy("a1", t0)), prod(healthy("a1", t0))}},
			want: []want{{rev: "b2"}, {rev: "a1"}},
		},
		{
			name: "approval required and missing",
			in: Input{Source: "a1", Now: t0.Add(time.Hour), Stages: []Stage{dev(healthy("a1", t0)), prod(func(s *Stage) {
				s.RequireApproval = true
			})}},
			want: []want{{rev: "a1"}, {pending: "a1", waiting: "waits for approval"}},
		},
		{
			name: "approval of another revision does not count",
			in: Input{Source: "b2", Now: t0.Add(time.Hour), Stages: []Stage{dev(healthy("b2", t0)), prod(func(s *Stage) {
				s.RequireApproval, s.Approved = true, "a1"
			})}},
			want: []want{{rev: "b2"}, {pending: "b2", waiting: "waits for approval"}},
		},
		{
			name: "approved after the soak",
			in: Input{Source: "a1", Now: t0.Add(time.Hour), Stages: []Stage{dev(healthy("a1", t0)), prod(func(s *Stage) {
				s.RequireApproval, s.Approved = true, "a1"
			})}},
			want: []want{{rev: "a1"}, {rev: "a1"}},
		},
		{
			name: "approved but still soaking",
			in: Input{Source: "a1", Now: t0.Add(time.Second), Stages: []Stage{dev(healthy("a1", t0)), prod(func(s *Stage) {
				s.RequireApproval, s.Approved = true, "a1"
			})}},
			want: []want{{rev: "a1"}, {pending: "a1", waiting: "soaks", after: 59 * time.Second}},
		},
		{
			name: "a commit that failed in dev is not tried again; prod keeps its revision",
			in: Input{Source: "b2", Now: t0.Add(time.Hour), Stages: []Stage{dev(func(s *Stage) {
				healthy("a1", t0)(s)
				s.FailedRevision = "b2"
			}), prod(healthy("a1", t0))}},
			want: []want{{rev: "a1", waiting: "revision b2 failed in this stage"}, {rev: "a1"}},
		},
		{
			name: "a newer commit after the failed one is tried",
			in: Input{Source: "c3", Now: t0.Add(time.Hour), Stages: []Stage{dev(func(s *Stage) {
				healthy("a1", t0)(s)
				s.FailedRevision = "b2"
			}), prod(healthy("a1", t0))}},
			want: []want{{rev: "c3"}, {rev: "a1"}},
		},
		{
			name: "dev unhealthy after promotion: prod keeps what it has",
			in: Input{Source: "b2", Now: t0.Add(time.Hour), Stages: []Stage{dev(func(s *Stage) {
				s.Revision, s.HealthyRevision = "b2", "a1"
			}), prod(healthy("a1", t0))}},
			want: []want{{rev: "b2"}, {rev: "a1", pending: "b2", waiting: "waiting for stage dev to be healthy with b2"}},
		},
		{
			name: "a revision that failed in dev with nothing to go back to is not handed on, even once healthy",
			in: Input{Source: "a1", Now: t0.Add(time.Hour), Stages: []Stage{dev(func(s *Stage) {
				healthy("a1", t0)(s)
				s.FailedRevision = "a1"
			}), prod(nil)}},
			want: []want{{rev: "a1"}, {waiting: "revision a1 failed in stage dev"}},
		},
		{
			name: "suspended: nothing moves",
			in:   Input{Source: "b2", Suspended: true, Now: t0.Add(time.Hour), Stages: []Stage{dev(healthy("a1", t0)), prod(healthy("a1", t0))}},
			want: []want{{rev: "a1", pending: "b2", waiting: "suspended"}, {rev: "a1"}},
		},
		{
			name: "three stages: each waits for the one before",
			in: Input{Source: "b2", Now: t0.Add(2 * time.Minute), Stages: []Stage{
				dev(healthy("b2", t0)), {Name: "staging", Soak: time.Minute, Revision: "b2", Healthy: true, HealthySince: t0.Add(90 * time.Second), HealthyRevision: "b2"}, prod(healthy("a1", t0)),
			}},
			want: []want{{rev: "b2"}, {rev: "b2"}, {rev: "a1", pending: "b2", waiting: "soaks in stage staging: healthy for 30s", after: 30 * time.Second}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.in)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d decisions, want %d", len(got), len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Revision != w.rev || g.Pending != w.pending || g.After != w.after || !strings.Contains(g.Waiting, w.waiting) || (w.waiting == "" && g.Waiting != "") {
					t.Errorf("stage %s: got %+v, want %+v", g.Stage, g, w)
				}
			}
		})
	}
}

func TestRollback(t *testing.T) {
	t.Parallel()
	cases := []struct {
		s      Stage
		failed string
		to     string
		ok     bool
	}{
		{Stage{Revision: "b2", HealthyRevision: "a1"}, "b2", "a1", true},
		{Stage{Revision: "a1"}, "a1", "", false},
		{Stage{Revision: "a1", HealthyRevision: "a1"}, "a1", "", false},
	}
	for _, tc := range cases {
		to, ok := Rollback(tc.s, tc.failed)
		if to != tc.to || ok != tc.ok {
			t.Errorf("Rollback(%+v, %s) = %s, %v; want %s, %v", tc.s, tc.failed, to, ok, tc.to, tc.ok)
		}
	}
}

func TestRegressed(t *testing.T) {
	t.Parallel()
	const timeout = time.Minute
	// dev was healthy with b2, and with a1 before it.
	stage := func(mut func(*Stage)) Stage {
		s := Stage{Name: "dev", Revision: "b2", HealthyRevision: "b2", PreviousHealthyRevision: "a1"}
		if mut != nil {
			mut(&s)
		}
		return s
	}
	sick := func(cluster, rev string, since time.Duration) Target {
		return Target{Cluster: cluster, Revision: rev, UnhealthySince: t0.Add(-since)}
	}
	well := func(cluster, rev string) Target { return Target{Cluster: cluster, Revision: rev} }
	cases := []struct {
		name    string
		stage   Stage
		targets []Target
		want    Regression
	}{
		{name: "all healthy", stage: stage(nil), targets: []Target{well("dev-a", "b2"), well("dev-b", "b2")}},
		{name: "unhealthy within the timeout: look again when it ends", stage: stage(nil),
			targets: []Target{sick("dev-a", "b2", 20*time.Second), sick("dev-b", "b2", 50*time.Second)},
			want:    Regression{After: 10 * time.Second}},
		{name: "unhealthy past the timeout: back to the previous healthy revision", stage: stage(nil),
			targets: []Target{well("dev-a", "b2"), sick("dev-b", "b2", timeout)},
			want:    Regression{Failed: "b2", To: "a1", Targets: []string{"dev-b"}}},
		{name: "no earlier healthy revision: promotion stops, nothing to go back to", stage: stage(func(s *Stage) { s.PreviousHealthyRevision = "" }),
			targets: []Target{sick("dev-a", "b2", 2*timeout)},
			want:    Regression{Failed: "b2", Targets: []string{"dev-a"}}},
		{name: "never healthy with its revision: the sync's own rollback handles it", stage: stage(func(s *Stage) { s.HealthyRevision = "a1" }),
			targets: []Target{sick("dev-a", "b2", 2*timeout)}},
		{name: "already failed here: not judged twice", stage: stage(func(s *Stage) { s.FailedRevision = "b2" }),
			targets: []Target{sick("dev-a", "b2", 2*timeout)}},
		{name: "a target still on another revision does not count", stage: stage(nil),
			targets: []Target{sick("dev-new", "a1", 2*timeout)}},
		{name: "the previous healthy revision failed since: nowhere to go", stage: stage(func(s *Stage) { s.PreviousHealthyRevision = "b2" }),
			targets: []Target{sick("dev-a", "b2", 2*timeout)},
			want:    Regression{Failed: "b2", Targets: []string{"dev-a"}}},
		{name: "nothing deployed yet", stage: Stage{Name: "dev"}, targets: []Target{well("dev-a", "")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Regressed(tc.stage, tc.targets, timeout, t0)
			if got.Failed != tc.want.Failed || got.To != tc.want.To || got.After != tc.want.After || strings.Join(got.Targets, ",") != strings.Join(tc.want.Targets, ",") {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
