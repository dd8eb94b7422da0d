package decide

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if _, ok := TerminationDeadline(mkPod("p", 1, 1, 0)); ok {
		t.Error("a pod that is not terminating has a deadline")
	}
	got, ok := TerminationDeadline(mkPod("p", 1, 1, 0, deleting(t0)))
	if !ok || !got.Equal(t0.Add(TerminationMargin)) {
		t.Errorf("deadline = %v, %v; want %v", got, ok, t0.Add(TerminationMargin))
	}
}
