package nodepool

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func cond(status metav1.ConditionStatus, since time.Time, msg string) *metav1.Condition {
	return &metav1.Condition{Status: status, LastTransitionTime: metav1.NewTime(since), Message: msg}
}

func policy() RepairPolicy {
	return RepairPolicy{NodeUnhealthyTimeout: 5 * time.Minute, NodeStartupTimeout: 10 * time.Minute,
		GPUUnhealthyTimeout: 10 * time.Minute, MaxUnhealthy: intstr.FromString("40%")}
}

func TestJudge(t *testing.T) {
	old := t0.Add(-time.Hour) // machines created an hour before t0
	for _, tc := range []struct {
		name      string
		h         MachineHealth
		now       time.Time
		unhealthy bool
		reason    string
	}{
		{"healthy", MachineHealth{Created: old, Registered: cond("True", old, ""), GPUReady: cond("True", old, "")}, t0, false, ""},
		{"new machine, node not yet registered: startup timeout not reached", MachineHealth{Created: t0.Add(-9 * time.Minute)}, t0, false, "NodeStartupTimeout"},
		{"new machine past the startup timeout", MachineHealth{Created: t0.Add(-10 * time.Minute)}, t0, true, "NodeStartupTimeout"},
		{"new machine, node NotReady since registering: startup rules", MachineHealth{Created: t0.Add(-6 * time.Minute), Registered: cond("False", t0.Add(-6*time.Minute), "node n is not Ready")}, t0, false, "NodeStartupTimeout"},
		{"a young node that was Ready goes NotReady: no startup grace", MachineHealth{Created: t0.Add(-2 * time.Minute), EverReady: true, Registered: cond("False", t0.Add(-5*time.Minute), "node n is not Ready")}, t0, true, "NodeNotReady"},
		{"node NotReady for 4m", MachineHealth{Created: old, Registered: cond("False", t0.Add(-4*time.Minute), "node n is not Ready")}, t0, false, "NodeNotReady"},
		{"node NotReady for 5m", MachineHealth{Created: old, Registered: cond("False", t0.Add(-5*time.Minute), "node n is not Ready")}, t0, true, "NodeNotReady"},
		{"node gone for 6m", MachineHealth{Created: old, Registered: cond("False", t0.Add(-6*time.Minute), "waiting for the node to register")}, t0, true, "NodeNotReady"},
		{"GPUs short for 9m", MachineHealth{Created: old, Registered: cond("True", old, ""), GPUReady: cond("False", t0.Add(-9*time.Minute), "7 of 8 GPUs allocatable")}, t0, false, "GPUUnhealthy"},
		{"GPUs short for 10m", MachineHealth{Created: old, Registered: cond("True", old, ""), GPUReady: cond("False", t0.Add(-10*time.Minute), "7 of 8 GPUs allocatable")}, t0, true, "GPUUnhealthy"},
		{"a young node's GPUs fall short: no startup grace", MachineHealth{Created: t0.Add(-2 * time.Minute), Registered: cond("True", t0.Add(-time.Minute), ""), GPUReady: cond("False", t0.Add(-10*time.Minute-time.Second), "7 of 8 GPUs allocatable")}, t0, true, "GPUUnhealthy"},
		{"a deleting machine is never judged", MachineHealth{Created: old, Deleting: true}, t0, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge(tc.h, policy(), tc.now)
			if v.Unhealthy != tc.unhealthy || v.Reason != tc.reason {
				t.Errorf("got unhealthy %v reason %q (deadline %s), want %v %q", v.Unhealthy, v.Reason, v.Deadline, tc.unhealthy, tc.reason)
			}
		})
	}
}

func TestPlanRepair(t *testing.T) {
	old := t0.Add(-time.Hour)
	ok := MachineHealth{Created: old, Registered: cond("True", old, "")}
	sick := MachineHealth{Created: old, Registered: cond("False", t0.Add(-6*time.Minute), "node n is not Ready")}
	soon := MachineHealth{Created: old, Registered: cond("False", t0.Add(-time.Minute), "node n is not Ready")}
	soonAfterReady := MachineHealth{Created: old, EverReady: true, Registered: cond("False", t0.Add(-time.Minute), "node n is not Ready")}
	starting := MachineHealth{Created: t0.Add(-time.Minute)}
	named := func(name string, h MachineHealth) MachineHealth { h.Name = name; return h }
	pool := func(hs ...MachineHealth) []MachineHealth { return hs }
	for _, tc := range []struct {
		name     string
		p        func(*RepairPolicy)
		machines []MachineHealth
		recent   []time.Time
		repair   []string
		blocked  string
		next     time.Time
	}{
		{name: "all healthy", machines: pool(named("a", ok), named("b", ok))},
		{name: "one of five unhealthy is repaired", machines: pool(named("a", ok), named("b", sick), named("c", ok), named("d", ok), named("e", ok)), repair: []string{"b"}},
		{name: "two of five (40%) are repaired", machines: pool(named("a", sick), named("b", sick), named("c", ok), named("d", ok), named("e", ok)), repair: []string{"a", "b"}},
		{name: "half the pool unhealthy: repair stops", machines: pool(named("a", sick), named("b", sick), named("c", ok), named("d", ok)), blocked: "2 of 4 machines are unhealthy"},
		{name: "a one-node pool is repaired under the default 40%", machines: pool(named("a", sick)), repair: []string{"a"}},
		{name: "0% repairs nothing", p: func(p *RepairPolicy) { p.MaxUnhealthy = intstr.FromString("0%") }, machines: pool(named("a", sick)), blocked: "1 of 1"},
		{name: "a count", p: func(p *RepairPolicy) { p.MaxUnhealthy = intstr.FromInt32(1) }, machines: pool(named("a", sick), named("b", ok)), repair: []string{"a"}},
		{name: "disabled", p: func(p *RepairPolicy) { p.Disabled = true }, machines: pool(named("a", sick), named("b", ok), named("c", ok))},
		{name: "one past its timeout, one failing since a moment: both count, repair stops", machines: pool(named("a", sick), named("b", soonAfterReady), named("c", ok), named("d", ok)), blocked: "2 of 4 machines are unhealthy"},
		{name: "machines still starting do not count", machines: pool(named("a", sick), named("b", starting), named("c", starting), named("d", ok)), repair: []string{"a"}},
		{name: "not yet: the plan says when to look again", machines: pool(named("a", soon), named("b", ok), named("c", ok)), next: t0.Add(4 * time.Minute)},
		{name: "three repairs in the hour are free", machines: pool(named("a", sick), named("b", ok), named("c", ok)),
			recent: []time.Time{t0.Add(-50 * time.Minute), t0.Add(-40 * time.Minute)}, repair: []string{"a"}},
		{name: "the fourth waits a minute after the last", machines: pool(named("a", sick), named("b", ok), named("c", ok)),
			recent: []time.Time{t0.Add(-50 * time.Minute), t0.Add(-40 * time.Minute), t0.Add(-30 * time.Second)}, blocked: "backing off", next: t0.Add(30 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy()
			if tc.p != nil {
				tc.p(&p)
			}
			plan := PlanRepair(p, tc.machines, tc.recent, t0)
			var got []string
			for _, a := range plan.Repair {
				got = append(got, a.Machine)
			}
			if strings.Join(got, ",") != strings.Join(tc.repair, ",") {
				t.Errorf("repair %v, want %v (blocked %q)", got, tc.repair, plan.Blocked)
			}
			if (tc.blocked == "") != (plan.Blocked == "") || !strings.Contains(plan.Blocked, tc.blocked) {
				t.Errorf("blocked %q, want %q", plan.Blocked, tc.blocked)
			}
			if !tc.next.IsZero() && !plan.Next.Equal(tc.next) {
				t.Errorf("next %s, want %s", plan.Next, tc.next)
			}
		})
	}
}

func TestBackoffUntil(t *testing.T) {
	last := t0.Add(-time.Second)
	hist := func(n int) []time.Time {
		var out []time.Time
		for i := n - 1; i >= 0; i-- {
			out = append(out, last.Add(-time.Duration(i)*time.Second))
		}
		return out
	}
	for _, tc := range []struct {
		n    int
		want time.Duration // after the last repair; 0: none
	}{{0, 0}, {2, 0}, {3, time.Minute}, {4, 2 * time.Minute}, {5, 4 * time.Minute}, {10, RepairBackoffMax}} {
		got := BackoffUntil(hist(tc.n), t0)
		if tc.want == 0 {
			if !got.IsZero() {
				t.Errorf("%d repairs: backoff until %s, want none", tc.n, got)
			}
			continue
		}
		if want := last.Add(tc.want); !got.Equal(want) {
			t.Errorf("%d repairs: until %s, want %s", tc.n, got, want)
		}
	}
	// Repairs older than the window do not count.
	if got := BackoffUntil([]time.Time{t0.Add(-3 * time.Hour), t0.Add(-2 * time.Hour), t0.Add(-90 * time.Minute)}, t0); !got.IsZero() {
		t.Errorf("old repairs back off until %s", got)
	}
	if s := FormatRepairs([]time.Time{t0.Add(-2 * time.Hour), t0.Add(-time.Minute)}, t0); s != "1796126340" {
		t.Errorf("FormatRepairs keeps %q", s)
	}
	if got := ParseRepairs("1796126340,bad,"); len(got) != 1 || !got[0].Equal(t0.Add(-time.Minute)) {
		t.Errorf("ParseRepairs %v", got)
	}
}
