package decide

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// deleting marks a pod terminating with the given deletionTimestamp (the
// API server sets it to the delete request's time plus the grace period).
func deleting(at time.Time) podOpt {
	return func(p *corev1.Pod) {
		ts := metav1.NewTime(at)
		p.DeletionTimestamp = &ts
		grace := int64(30)
		p.DeletionGracePeriodSeconds = &grace
	}
}

func hostPortPod(port int32) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: port, HostPort: port}}
	}
}

// gpuNode is a ready 8-GPU node of pool "gpu" holding pods.
func gpuNode(name string, pods ...*corev1.Pod) NodeInfo {
	return ready(gpuPool("gpu", 8, 0, 0).Template.DeepCopy(), "gpu", pods...)
}

func named(n NodeInfo, name string) NodeInfo {
	n.Node.Name = name
	n.Node.Labels[corev1.LabelHostname] = name
	return n
}

// rolloutNodes is count 8-GPU nodes each full of 8 one-GPU pods of the old
// ReplicaSet, terminating with the given deletionTimestamp.
func rolloutNodes(count int, deletionAt time.Time) []NodeInfo {
	var out []NodeInfo
	for i := range count {
		pods := mkPods(fmt.Sprintf("old-%d", i), 8, 100, 128, 1, tolerateGPU(), podOwner("ReplicaSet", "old-rs"), deleting(deletionAt))
		out = append(out, named(gpuNode(""), fmt.Sprintf("n%d", i)))
		out[i].Pods = pods
	}
	return out
}

// awaiting renders the plan's Schedulable as "pod@node" (with "~" when it
// awaits termination), sorted.
func awaiting(p ScaleUpPlan) string {
	var parts []string
	for _, pl := range p.Schedulable {
		mark := "@"
		if pl.AwaitsTermination {
			mark = "~"
		}
		parts = append(parts, pl.Pod.Name+mark+pl.Node)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// TestScaleUpAwaitsTerminatingPods: a pending pod that fits a ready node
// once the pods terminating there are gone waits for that room until their
// deadline (deletionTimestamp + TerminationMargin) instead of growing a
// pool; past the deadline, or where the room would not be enough, Cluster
// Autoscaler's semantics apply.
func TestScaleUpAwaitsTerminatingPods(t *testing.T) {
	t.Parallel()
	soon := t0.Add(20 * time.Second)                         // deadline t0+35s
	overdue := t0.Add(-TerminationMargin - time.Second)      // deadline passed
	atDeadline := t0.Add(-TerminationMargin)                 // deadline == now: passed
	withinMargin := t0.Add(-TerminationMargin + time.Second) // deletionTimestamp passed, deadline not
	later := t0.Add(50 * time.Second)                        // deadline t0+65s
	full := func(name string, n int, gpus int64, opts ...podOpt) []*corev1.Pod {
		return mkPods(name, n, 100, 128, gpus, append([]podOpt{tolerateGPU()}, opts...)...)
	}
	tests := []struct {
		name    string
		pending []*corev1.Pod
		nodes   []NodeInfo
		pools   []Pool
		want    string    // increases
		sched   string    // awaiting(plan)
		recheck time.Time // plan.RecheckAt
	}{
		{
			name:    "room freed before the deadline: the pod waits, no scale-up",
			pending: full("new", 1, 1),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, deleting(soon))...), "a")},
			pools:   []Pool{gpuPool("gpu", 8, 1, 10)},
			sched:   "new-0~a",
			recheck: soon.Add(TerminationMargin),
		},
		{
			name:    "deletionTimestamp passed but within the margin: still waits",
			pending: full("new", 1, 1),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, deleting(withinMargin))...), "a")},
			pools:   []Pool{gpuPool("gpu", 8, 1, 10)},
			sched:   "new-0~a",
			recheck: withinMargin.Add(TerminationMargin),
		},
		{
			name:    "deadline passed: the terminating pods hold their room, scale-up",
			pending: full("new", 1, 1),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, deleting(overdue))...), "a")},
			pools:   []Pool{gpuPool("gpu", 8, 1, 10)},
			want:    "gpu+1",
		},
		{
			name:    "deadline exactly now counts as passed",
			pending: full("new", 1, 1),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, deleting(atDeadline))...), "a")},
			pools:   []Pool{gpuPool("gpu", 8, 1, 10)},
			want:    "gpu+1",
		},
		{
			name:    "more pending pods than freed room: the rest grow the pool",
			pending: full("new", 4, 1),
			nodes:   []NodeInfo{named(gpuNode("", append(full("run", 6, 1), full("old", 2, 1, deleting(soon))...)...), "a")},
			pools:   []Pool{gpuPool("gpu", 8, 1, 10)},
			want:    "gpu+1",
			sched:   "new-0~a,new-1~a",
			recheck: soon.Add(TerminationMargin),
		},
		{
			name:    "free room now is used before room that is still terminating",
			pending: full("new", 2, 1),
			nodes: []NodeInfo{
				named(gpuNode("", full("old", 8, 1, deleting(soon))...), "a"),
				named(gpuNode("", full("run", 7, 1)...), "b"),
			},
			pools:   []Pool{gpuPool("gpu", 8, 2, 10)},
			sched:   "new-0@b,new-1~a",
			recheck: soon.Add(TerminationMargin),
		},
		{
			name:    "freed room too small for the pod: scale-up",
			pending: full("big", 1, 8),
			nodes:   []NodeInfo{named(gpuNode("", append(full("run", 4, 1), full("old", 4, 1, deleting(soon))...)...), "a")},
			pools:   []Pool{gpuPool("gpu", 8, 1, 10)},
			want:    "gpu+1",
		},
		{
			name:    "only pods before their deadline count: 4 GPUs due, 4 overdue",
			pending: full("new", 5, 1),
			nodes:   []NodeInfo{named(gpuNode("", append(full("due", 4, 1, deleting(soon)), full("stuck", 4, 1, deleting(overdue))...)...), "a")},
			pools:   []Pool{gpuPool("gpu", 8, 1, 10)},
			want:    "gpu+1",
			sched:   "new-0~a,new-1~a,new-2~a,new-3~a",
			recheck: soon.Add(TerminationMargin),
		},
		{
			name:    "recheck at the earliest deadline relied on",
			pending: full("new", 16, 1),
			nodes: []NodeInfo{
				named(gpuNode("", full("old-a", 8, 1, deleting(later))...), "a"),
				named(gpuNode("", full("old-b", 8, 1, deleting(soon))...), "b"),
			},
			pools:   []Pool{gpuPool("gpu", 8, 2, 10)},
			sched:   "new-0~a,new-10~b,new-11~b,new-12~b,new-13~b,new-14~b,new-15~b,new-1~a,new-2~a,new-3~a,new-4~a,new-5~a,new-6~a,new-7~a,new-8~b,new-9~b",
			recheck: soon.Add(TerminationMargin),
		},
		{
			name:    "a node that is not ready offers no room",
			pending: full("new", 1, 1),
			nodes: []NodeInfo{func() NodeInfo {
				n := named(gpuNode("", full("old", 8, 1, deleting(soon))...), "a")
				n.Ready = false
				return n
			}()},
			pools: []Pool{gpuPool("gpu", 8, 1, 10)},
			want:  "gpu+1",
		},
		{
			name:    "a node being deleted offers no room",
			pending: full("new", 1, 1),
			nodes: []NodeInfo{func() NodeInfo {
				n := named(gpuNode("", full("old", 8, 1, deleting(soon))...), "a")
				n.Deleting = true
				return n
			}()},
			pools: []Pool{gpuPool("gpu", 8, 1, 10)},
			want:  "gpu+1",
		},
		{
			name:    "a host port of a terminating pod is held until it is gone",
			pending: full("new", 1, 1, hostPortPod(8080)),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, hostPortPod(8080), deleting(soon))...), "a")},
			pools:   []Pool{gpuPool("gpu", 8, 1, 10)},
			want:    "gpu+1",
		},
		{
			name:    "finished pods are not terminating room: they hold nothing already",
			pending: full("new", 2, 4),
			nodes: []NodeInfo{named(gpuNode("", append(full("run", 4, 1), full("done", 4, 1, deleting(soon), func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodSucceeded
			})...)...), "a")},
			pools: []Pool{gpuPool("gpu", 8, 1, 10)},
			want:  "gpu+1",
			sched: "new-0@a",
		},
		{
			name:    "rollout: 40 new pods wait for 40 terminating ones on 5 nodes",
			pending: full("new", 40, 1, podOwner("ReplicaSet", "new-rs")),
			nodes:   rolloutNodes(5, soon),
			pools:   []Pool{gpuPool("gpu", 8, 5, 10)},
			recheck: soon.Add(TerminationMargin),
		},
		{
			name:    "rollout past the deadline: Cluster Autoscaler grows the pool",
			pending: full("new", 40, 1, podOwner("ReplicaSet", "new-rs")),
			nodes:   rolloutNodes(5, overdue),
			pools:   []Pool{gpuPool("gpu", 8, 5, 10)},
			want:    "gpu+5",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, memo := range []*Memo{nil, NewMemo()} {
				plan := ScaleUp(Snapshot{Nodes: tt.nodes, Pending: tt.pending, Memo: memo}, tt.pools, Expander{}, t0)
				if got := increases(plan); got != tt.want {
					t.Errorf("increases = %q, want %q (reasons %v)", got, tt.want, reasonsOf(plan))
				}
				got := awaiting(plan)
				if strings.HasPrefix(tt.name, "rollout: ") {
					// 40 pods: check the count and the marks, not the names.
					if n := strings.Count(got, "~"); n != 40 || strings.Contains(got, "@") {
						t.Errorf("schedulable = %q, want 40 pods awaiting termination", got)
					}
				} else if got != tt.sched {
					t.Errorf("schedulable = %q, want %q", got, tt.sched)
				}
				if !plan.RecheckAt.Equal(tt.recheck) {
					t.Errorf("RecheckAt = %v, want %v", plan.RecheckAt, tt.recheck)
				}
			}
		})
	}
}

// TestTerminationDeadline: the deadline is deletionTimestamp plus the
// margin; a pod that is not terminating has none.
func TestTerminationDeadline(t *testing.T) {
	t.Parallel()
	if _, ok := TerminationDeadline(mkPod("p", 1, 1, 0)); ok {
		t.Error("a pod that is not terminating has a deadline")
	}
	got, ok := TerminationDeadline(mkPod("p", 1, 1, 0, deleting(t0)))
	if !ok || !got.Equal(t0.Add(TerminationMargin)) {
		t.Errorf("deadline = %v, %v; want %v", got, ok, t0.Add(TerminationMargin))
	}
}

// ownedBy makes the pod's controller the given UID.
func ownedBy(uid string) podOpt { return podOwner("ReplicaSet", uid) }

// TestScaleUpAwaitsPodsOfLeavingControllers: pods whose controller is
// leaving (Snapshot.LeavingOwners: deleted, or being deleted in the
// foreground, before the garbage collector marks its pods) count as
// terminating from the time it left: their room waits for pending pods
// until that time plus their grace period plus the margin, and pending
// pods of a leaving controller trigger nothing.
func TestScaleUpAwaitsPodsOfLeavingControllers(t *testing.T) {
	t.Parallel()
	left := t0.Add(-time.Second)                                      // deadline t0+44s (30 s grace)
	longAgo := t0.Add(-defaultGracePeriod - TerminationMargin)        // deadline == now: passed
	justInTime := t0.Add(-defaultGracePeriod - TerminationMargin + 1) // deadline 1 ns after now
	full := func(name string, n int, gpus int64, opts ...podOpt) []*corev1.Pod {
		return mkPods(name, n, 100, 128, gpus, append([]podOpt{tolerateGPU()}, opts...)...)
	}
	grace := func(s int64) podOpt { return func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = &s } }
	notController := func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil }
	tests := []struct {
		name    string
		pending []*corev1.Pod
		nodes   []NodeInfo
		leaving map[types.UID]time.Time
		want    string // increases
		sched   string // awaiting(plan)
		recheck time.Time
		reasons map[string]string // pod -> reason, for pods that trigger nothing
	}{
		{
			name:    "controller gone, pods not yet terminating: the new pod waits for their room",
			pending: full("new", 1, 1, ownedBy("new-rs")),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, ownedBy("old-rs"))...), "a")},
			leaving: map[types.UID]time.Time{"old-rs": left},
			sched:   "new-0~a",
			recheck: left.Add(defaultGracePeriod + TerminationMargin),
		},
		{
			name:    "without the controller listed the pods hold their room: scale-up",
			pending: full("new", 1, 1, ownedBy("new-rs")),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, ownedBy("old-rs"))...), "a")},
			want:    "gpu+1",
		},
		{
			name:    "another controller leaving frees nothing here",
			pending: full("new", 1, 1, ownedBy("new-rs")),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, ownedBy("old-rs"))...), "a")},
			leaving: map[types.UID]time.Time{"other-rs": left},
			want:    "gpu+1",
		},
		{
			name:    "an owner reference that is not the controller does not count",
			pending: full("new", 1, 1, ownedBy("new-rs")),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, ownedBy("old-rs"), notController)...), "a")},
			leaving: map[types.UID]time.Time{"old-rs": left},
			want:    "gpu+1",
		},
		{
			name:    "pods without a controller never count before they terminate",
			pending: full("new", 1, 1, ownedBy("new-rs")),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, bare())...), "a")},
			leaving: map[types.UID]time.Time{"rs-uid": left},
			want:    "gpu+1",
		},
		{
			name:    "the deadline follows the pod's grace period",
			pending: full("new", 1, 1, ownedBy("new-rs")),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, ownedBy("old-rs"), grace(300))...), "a")},
			leaving: map[types.UID]time.Time{"old-rs": left},
			sched:   "new-0~a",
			recheck: left.Add(300*time.Second + TerminationMargin),
		},
		{
			name:    "left long ago and still there: the pods hold their room (Cluster Autoscaler)",
			pending: full("new", 1, 1, ownedBy("new-rs")),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, ownedBy("old-rs"))...), "a")},
			leaving: map[types.UID]time.Time{"old-rs": longAgo},
			want:    "gpu+1",
		},
		{
			name:    "one nanosecond before the deadline the room still counts",
			pending: full("new", 1, 1, ownedBy("new-rs")),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, ownedBy("old-rs"))...), "a")},
			leaving: map[types.UID]time.Time{"old-rs": justInTime},
			sched:   "new-0~a",
			recheck: justInTime.Add(defaultGracePeriod + TerminationMargin),
		},
		{
			name:    "a pod already terminating keeps its own deadline",
			pending: full("new", 1, 1, ownedBy("new-rs")),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, ownedBy("old-rs"), deleting(t0.Add(5*time.Second)))...), "a")},
			leaving: map[types.UID]time.Time{"old-rs": left},
			sched:   "new-0~a",
			recheck: t0.Add(5*time.Second + TerminationMargin),
		},
		{
			name:    "a pending pod of a leaving controller triggers nothing",
			pending: full("stale", 1, 1, ownedBy("old-rs")),
			nodes:   []NodeInfo{named(gpuNode("", full("run", 8, 1, ownedBy("keep-rs"))...), "a")},
			leaving: map[types.UID]time.Time{"old-rs": left},
			reasons: map[string]string{"stale-0": reasonOwnerLeaving},
		},
		{
			name:    "a pending pod whose controller left long ago triggers a scale-up",
			pending: full("stale", 1, 1, ownedBy("old-rs")),
			nodes:   []NodeInfo{named(gpuNode("", full("run", 8, 1, ownedBy("keep-rs"))...), "a")},
			leaving: map[types.UID]time.Time{"old-rs": longAgo},
			want:    "gpu+1",
		},
		{
			name:    "rollout: 40 new pods wait for the 40 pods of a deleted ReplicaSet on 5 nodes",
			pending: full("new", 40, 1, ownedBy("new-rs")),
			nodes: func() []NodeInfo {
				var out []NodeInfo
				for i := range 5 {
					out = append(out, named(gpuNode("", full(fmt.Sprintf("old-%d", i), 8, 1, ownedBy("old-rs"))...), fmt.Sprintf("n%d", i)))
				}
				return out
			}(),
			leaving: map[types.UID]time.Time{"old-rs": left},
			recheck: left.Add(defaultGracePeriod + TerminationMargin),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, memo := range []*Memo{nil, NewMemo()} {
				pools := []Pool{gpuPool("gpu", 8, len(tt.nodes), 10)}
				plan := ScaleUp(Snapshot{Nodes: tt.nodes, Pending: tt.pending, LeavingOwners: tt.leaving, Memo: memo}, pools, Expander{}, t0)
				if got := increases(plan); got != tt.want {
					t.Errorf("increases = %q, want %q (reasons %v)", got, tt.want, reasonsOf(plan))
				}
				got := awaiting(plan)
				if strings.HasPrefix(tt.name, "rollout: ") {
					if n := strings.Count(got, "~"); n != 40 || strings.Contains(got, "@") {
						t.Errorf("schedulable = %q, want 40 pods awaiting termination", got)
					}
				} else if got != tt.sched {
					t.Errorf("schedulable = %q, want %q", got, tt.sched)
				}
				if !plan.RecheckAt.Equal(tt.recheck) {
					t.Errorf("RecheckAt = %v, want %v", plan.RecheckAt, tt.recheck)
				}
				for pod, reason := range tt.reasons {
					if r := reasonsOf(plan)[pod]; r != reason {
						t.Errorf("reason of %s = %q, want %q", pod, r, reason)
					}
				}
			}
		})
	}
}

// TestLeavingDeadline: a terminating pod's deadline is its own; a pod of
// a leaving controller gets the time the controller left plus its grace
// period plus the margin; others have none.
func TestLeavingDeadline(t *testing.T) {
	t.Parallel()
	leaving := map[types.UID]time.Time{"old-rs": t0}
	zero := func(p *corev1.Pod) { var s int64; p.Spec.TerminationGracePeriodSeconds = &s }
	tests := []struct {
		name string
		pod  *corev1.Pod
		want time.Time // zero: none
	}{
		{"not terminating, controller present", mkPod("p", 1, 1, 0, ownedBy("live-rs")), time.Time{}},
		{"controller leaving, default grace", mkPod("p", 1, 1, 0, ownedBy("old-rs")), t0.Add(45 * time.Second)},
		{"controller leaving, grace 0", mkPod("p", 1, 1, 0, ownedBy("old-rs"), zero), t0.Add(TerminationMargin)},
		{"terminating wins over the controller", mkPod("p", 1, 1, 0, ownedBy("old-rs"), deleting(t0.Add(time.Hour))), t0.Add(time.Hour + TerminationMargin)},
		{"no controller", mkPod("p", 1, 1, 0, bare()), time.Time{}},
		{"nil pod", nil, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := LeavingDeadline(tt.pod, leaving)
			if ok != !tt.want.IsZero() || !got.Equal(tt.want) {
				t.Errorf("LeavingDeadline = %v, %v; want %v", got, ok, tt.want)
			}
		})
	}
}

// TestScaleUpAwaitingOwners: a pending pod waiting for its controllers to
// be seen (Snapshot.AwaitingOwners) takes room that is free, coming up or
// being freed as any pod does, but grows no pool until its wait is over;
// the plan lists it and rechecks when the first wait ends.
func TestScaleUpAwaitingOwners(t *testing.T) {
	t.Parallel()
	soon := t0.Add(20 * time.Second) // terminating pods' deadline t0+35s
	wait := t0.Add(5 * time.Second)
	full := func(name string, n int, gpus int64, opts ...podOpt) []*corev1.Pod {
		return mkPods(name, n, 100, 128, gpus, append([]podOpt{tolerateGPU()}, opts...)...)
	}
	tests := []struct {
		name     string
		pending  []*corev1.Pod
		nodes    []NodeInfo
		until    map[string]time.Time // pod name -> end of its wait
		want     string               // increases
		sched    string               // awaiting(plan)
		awaiting string               // plan.AwaitingOwners, names
		recheck  time.Time
	}{
		{
			name:     "fits nothing: waits, no scale-up",
			pending:  full("new", 1, 1),
			nodes:    []NodeInfo{named(gpuNode("", full("run", 8, 1)...), "a")},
			until:    map[string]time.Time{"new-0": wait},
			awaiting: "new-0",
			recheck:  wait,
		},
		{
			name:    "wait over (ends now): scale-up",
			pending: full("new", 1, 1),
			nodes:   []NodeInfo{named(gpuNode("", full("run", 8, 1)...), "a")},
			until:   map[string]time.Time{"new-0": t0},
			want:    "gpu+1",
		},
		{
			name:    "fits free room: placed as any pod",
			pending: full("new", 1, 1),
			nodes:   []NodeInfo{named(gpuNode("", full("run", 7, 1)...), "a")},
			until:   map[string]time.Time{"new-0": wait},
			sched:   "new-0@a",
		},
		{
			name:    "fits room being freed: waits for it as any pod",
			pending: full("new", 1, 1),
			nodes:   []NodeInfo{named(gpuNode("", full("old", 8, 1, deleting(soon))...), "a")},
			until:   map[string]time.Time{"new-0": wait},
			sched:   "new-0~a",
			recheck: soon.Add(TerminationMargin),
		},
		{
			name:     "only the waiting pod is held back",
			pending:  append(full("new", 1, 1), full("other", 1, 1, podOwner("ReplicaSet", "other-rs"))...),
			nodes:    []NodeInfo{named(gpuNode("", full("run", 8, 1)...), "a")},
			until:    map[string]time.Time{"new-0": wait},
			want:     "gpu+1",
			awaiting: "new-0",
			recheck:  wait,
		},
		{
			name:     "recheck at the earliest of a wait and a deadline",
			pending:  full("new", 2, 1),
			nodes:    []NodeInfo{named(gpuNode("", append(full("run", 7, 1), full("old", 1, 1, deleting(soon))...)...), "a")},
			until:    map[string]time.Time{"new-0": wait, "new-1": wait},
			sched:    "new-0~a",
			awaiting: "new-1",
			recheck:  wait,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			until := map[types.UID]time.Time{}
			for _, p := range tt.pending {
				if u, ok := tt.until[p.Name]; ok {
					until[p.UID] = u
				}
			}
			for _, memo := range []*Memo{nil, NewMemo()} {
				pools := []Pool{gpuPool("gpu", 8, len(tt.nodes), 10)}
				plan := ScaleUp(Snapshot{Nodes: tt.nodes, Pending: tt.pending, AwaitingOwners: until, Memo: memo}, pools, Expander{}, t0)
				if got := increases(plan); got != tt.want {
					t.Errorf("increases = %q, want %q (reasons %v)", got, tt.want, reasonsOf(plan))
				}
				if got := awaiting(plan); got != tt.sched {
					t.Errorf("schedulable = %q, want %q", got, tt.sched)
				}
				var names []string
				for _, p := range plan.AwaitingOwners {
					names = append(names, p.Name)
				}
				if got := strings.Join(names, ","); got != tt.awaiting {
					t.Errorf("awaiting owners = %q, want %q", got, tt.awaiting)
				}
				if !plan.RecheckAt.Equal(tt.recheck) {
					t.Errorf("RecheckAt = %v, want %v", plan.RecheckAt, tt.recheck)
				}
			}
		})
	}
}
