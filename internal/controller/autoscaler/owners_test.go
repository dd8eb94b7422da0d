package autoscaler

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

var ownersT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// render lists leaving UIDs as "uid@seconds after ownersT0", sorted.
func render(m map[types.UID]time.Time) string {
	var parts []string
	for uid, t := range m {
		parts = append(parts, fmt.Sprintf("%s@%g", uid, t.Sub(ownersT0).Seconds()))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func at(s int) time.Time { return ownersT0.Add(time.Duration(s) * time.Second) }

// TestLeavingOwners: the dependents of a controller leave when it is gone
// (background deletion) or being deleted in the foreground, or when its
// own controller leaves; never when it orphans them, and never for owners
// not seen.
func TestLeavingOwners(t *testing.T) {
	tests := []struct {
		name   string
		owners map[types.UID]OwnerState
		want   string
	}{
		{
			name:   "all present: nothing leaves",
			owners: map[types.UID]OwnerState{"deploy": {}, "rs": {Controller: "deploy"}},
		},
		{
			name:   "Deployment deleted in the background: its ReplicaSet's pods leave from then",
			owners: map[types.UID]OwnerState{"deploy": {GoneAt: at(1)}, "rs": {Controller: "deploy"}},
			want:   "deploy@1,rs@1",
		},
		{
			name:   "ReplicaSet deleted in the background (Deployment already gone): the earlier time",
			owners: map[types.UID]OwnerState{"deploy": {GoneAt: at(1)}, "rs": {Controller: "deploy", GoneAt: at(2)}},
			want:   "deploy@1,rs@1",
		},
		{
			name:   "Deployment deleted in the foreground",
			owners: map[types.UID]OwnerState{"deploy": {ForegroundSince: at(3)}, "rs": {Controller: "deploy"}},
			want:   "deploy@3,rs@3",
		},
		{
			name:   "Deployment orphaning its ReplicaSet: nothing leaves",
			owners: map[types.UID]OwnerState{"deploy": {Orphaning: true}, "rs": {Controller: "deploy"}},
		},
		{
			name:   "Deployment gone after orphaning (the ReplicaSet's reference not yet seen removed)",
			owners: map[types.UID]OwnerState{"deploy": {Orphaning: true, GoneAt: at(4)}, "rs": {Controller: "deploy"}},
		},
		{
			name:   "ReplicaSet orphaning its pods while its Deployment is deleted: the pods stay",
			owners: map[types.UID]OwnerState{"deploy": {GoneAt: at(1)}, "rs": {Controller: "deploy", Orphaning: true}},
			want:   "deploy@1",
		},
		{
			name:   "controller never seen: counts as present",
			owners: map[types.UID]OwnerState{"rs": {Controller: "unknown"}},
		},
		{
			name:   "CronJob deleted: its Jobs and their pods leave",
			owners: map[types.UID]OwnerState{"cron": {GoneAt: at(5)}, "job-a": {Controller: "cron"}, "job-b": {Controller: "cron"}, "other": {}},
			want:   "cron@5,job-a@5,job-b@5",
		},
		{
			name:   "a cycle of references ends without leaving",
			owners: map[types.UID]OwnerState{"a": {Controller: "b"}, "b": {Controller: "a"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := render(LeavingOwners(tt.owners)); got != tt.want {
				t.Errorf("LeavingOwners = %q, want %q", got, tt.want)
			}
		})
	}
}

func ownerMeta(uid, controller string, mod func(*metav1.PartialObjectMetadata)) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid)}}
	if controller != "" {
		yes := true
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: controller, UID: types.UID(controller), Controller: &yes}}
	}
	if mod != nil {
		mod(m)
	}
	return m
}

func deletingWith(finalizer string, ts time.Time) func(*metav1.PartialObjectMetadata) {
	return func(m *metav1.PartialObjectMetadata) {
		t := metav1.NewTime(ts)
		m.DeletionTimestamp = &t
		zero := int64(0)
		m.DeletionGracePeriodSeconds = &zero
		m.Finalizers = []string{finalizer}
	}
}

// TestOwnerTracker feeds the tracker informer events as the garbage
// collector causes them for each propagation policy and checks which
// controllers it reports leaving, and that deleted ones are forgotten
// after goneTTL.
func TestOwnerTracker(t *testing.T) {
	type step struct {
		event string // add, update, delete, tombstone, wait
		obj   *metav1.PartialObjectMetadata
		wait  time.Duration
		want  string // Leaving() after the step, times in seconds after ownersT0
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "background: Deployment gone, then its ReplicaSet",
			steps: []step{
				{event: "add", obj: ownerMeta("deploy", "", nil)},
				{event: "add", obj: ownerMeta("rs", "deploy", nil)},
				{event: "wait", wait: 2 * time.Second},
				{event: "delete", obj: ownerMeta("deploy", "", nil), want: "deploy@2,rs@2"},
				{event: "wait", wait: time.Second, want: "deploy@2,rs@2"},
				{event: "delete", obj: ownerMeta("rs", "deploy", nil), want: "deploy@2,rs@2"},
			},
		},
		{
			name: "foreground: leaving from the deletion's start",
			steps: []step{
				{event: "add", obj: ownerMeta("deploy", "", nil)},
				{event: "add", obj: ownerMeta("rs", "deploy", nil)},
				{event: "update", obj: ownerMeta("deploy", "", deletingWith(metav1.FinalizerDeleteDependents, at(1))), want: "deploy@1,rs@1"},
			},
		},
		{
			name: "orphan: the finalizer is removed before the Deployment goes; nothing leaves",
			steps: []step{
				{event: "add", obj: ownerMeta("deploy", "", nil)},
				{event: "add", obj: ownerMeta("rs", "deploy", nil)},
				{event: "update", obj: ownerMeta("deploy", "", deletingWith(metav1.FinalizerOrphanDependents, at(1)))},
				{event: "update", obj: ownerMeta("deploy", "", func(m *metav1.PartialObjectMetadata) {
					deletingWith(metav1.FinalizerOrphanDependents, at(1))(m)
					m.Finalizers = nil
				})},
				{event: "delete", obj: ownerMeta("deploy", "", nil)},
				{event: "update", obj: ownerMeta("rs", "", nil)}, // the garbage collector removed the reference
			},
		},
		{
			name: "deletion missed (relist): a tombstone counts as gone",
			steps: []step{
				{event: "add", obj: ownerMeta("job", "", nil)},
				{event: "wait", wait: 5 * time.Second},
				{event: "tombstone", obj: ownerMeta("job", "", nil), want: "job@5"},
			},
		},
		{
			name: "forgotten after goneTTL",
			steps: []step{
				{event: "add", obj: ownerMeta("rs", "", nil)},
				{event: "delete", obj: ownerMeta("rs", "", nil), want: "rs@0"},
				{event: "wait", wait: goneTTL, want: "rs@0"},
				{event: "wait", wait: time.Second},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(ownersT0)
			o := newOwnerTracker(clk, nil)
			h := o.handler()
			for i, s := range tt.steps {
				switch s.event {
				case "add":
					h.OnAdd(s.obj, false)
				case "update":
					h.OnUpdate(nil, s.obj)
				case "delete":
					h.OnDelete(s.obj)
				case "tombstone":
					h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "default/" + s.obj.Name, Obj: s.obj})
				case "wait":
					clk.SetTime(clk.Now().Add(s.wait))
				}
				if got := render(o.Leaving()); got != s.want {
					t.Errorf("after step %d (%s): Leaving = %q, want %q", i, s.event, got, s.want)
				}
			}
		})
	}
}

// TestUnseenController: a pod waits for the first controller of its chain
// (of a kind the tracker follows) that the tracker has not seen; a chain
// ends at a controller of another kind or without a controller.
func TestUnseenController(t *testing.T) {
	pod := func(apiVersion, kind, uid string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
		if kind != "" {
			yes := true
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: uid, UID: types.UID(uid), Controller: &yes}}
		}
		return p
	}
	rs := pod("apps/v1", "ReplicaSet", "rs")
	tests := []struct {
		name   string
		pod    *corev1.Pod
		owners map[types.UID]OwnerState
		want   types.UID // "": none unseen
	}{
		{"no controller", pod("", "", ""), nil, ""},
		{"controller of a kind not followed", pod("argoproj.io/v1alpha1", "Rollout", "ro"), nil, ""},
		{"ReplicaSet not seen", rs, nil, "rs"},
		{"ReplicaSet of another group is not followed", pod("example.com/v1", "ReplicaSet", "rs"), nil, ""},
		{"another version of the group is followed", pod("apps/v1beta2", "ReplicaSet", "rs"), nil, "rs"},
		{"ReplicaSet seen, no controller", rs, map[types.UID]OwnerState{"rs": {}}, ""},
		{"ReplicaSet seen, its Deployment not", rs, map[types.UID]OwnerState{"rs": {Controller: "d", ControllerTracked: true}}, "d"},
		{"ReplicaSet seen, its controller of a kind not followed", rs, map[types.UID]OwnerState{"rs": {Controller: "ro"}}, ""},
		{"both seen", rs, map[types.UID]OwnerState{"rs": {Controller: "d", ControllerTracked: true}, "d": {}}, ""},
		{"both seen, gone", rs, map[types.UID]OwnerState{"rs": {Controller: "d", ControllerTracked: true, GoneAt: at(1)}, "d": {GoneAt: at(1)}}, ""},
		{"Job seen, its CronJob not", pod("batch/v1", "Job", "job"), map[types.UID]OwnerState{"job": {Controller: "cron", ControllerTracked: true}}, "cron"},
		{"a cycle ends", rs, map[types.UID]OwnerState{"rs": {Controller: "d", ControllerTracked: true}, "d": {Controller: "rs", ControllerTracked: true}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := UnseenController(tt.owners, tt.pod)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("UnseenController = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

// BenchmarkOwnerTrackerView is the per-pass cost of the tracker's view for
// the fleet benchmark's burst: 500 pending pods of one Deployment, with the
// 30 other Deployments and their ReplicaSets known.
func BenchmarkOwnerTrackerView(b *testing.B) {
	o := newOwnerTracker(clocktesting.NewFakePassiveClock(ownersT0), nil)
	h := o.handler()
	for i := range 31 {
		d, rs := fmt.Sprintf("deploy-%d", i), fmt.Sprintf("rs-%d", i)
		h.OnAdd(ownerMeta(d, "", nil), true)
		h.OnAdd(ownerMeta(rs, d, nil), true)
	}
	yes := true
	pending := make([]*corev1.Pod, 500)
	for i := range pending {
		pending[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint(i), UID: types.UID(fmt.Sprint(i)),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-30", UID: "rs-30", Controller: &yes}}}}
	}
	b.ResetTimer()
	for range b.N {
		if _, unseen := o.View(pending); len(unseen) != 0 {
			b.Fatalf("%d pods wait for their controllers", len(unseen))
		}
	}
}
