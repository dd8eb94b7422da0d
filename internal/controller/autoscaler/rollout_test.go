package autoscaler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/autoscaler/decide"
)

// onePodGPU is a one-GPU pod of the given controller (apiVersion/kind/uid),
// bound to node when it is not "", else unschedulable.
func onePodGPU(name, controller, node string) *corev1.Pod {
	var ref []metav1.OwnerReference
	if controller != "" {
		parts := strings.Split(controller, "/")
		apiVersion, kind, uid := strings.Join(parts[:len(parts)-2], "/"), parts[len(parts)-2], parts[len(parts)-1]
		ref = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: uid, UID: types.UID(uid), Controller: ptr.To(true)}}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name), ResourceVersion: "1", OwnerReferences: ref},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}},
			Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if node == "" {
		p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}
	}
	return p
}

// rolloutCluster is 5 ready gpu-h100x8 nodes of pool gpu (0..10), each
// full with 8 one-GPU pods of ReplicaSet rs-old.
func rolloutCluster() (pools []decide.Pool, machines []*fkev1.Machine, nodes []*corev1.Node, bound []*corev1.Pod) {
	for i := range 5 {
		m, n := machine(fmt.Sprintf("gpu-%d", i), true, true)
		n.Spec.Taints = nil // kube-controller-manager removed the start-up taint long ago
		machines, nodes = append(machines, m), append(nodes, n)
		for j := range 8 {
			bound = append(bound, onePodGPU(fmt.Sprintf("old-%d-%d", i, j), "apps/v1/ReplicaSet/rs-old", n.Name))
		}
	}
	np := gpuPool(5)
	np.Spec.Autoscaling.MaxSize = 10
	pools, _ = decide.BuildPools([]*fkev1.NodePool{np}, types_(), machines, nil, nil)
	return pools, machines, nodes, bound
}

// TestRolloutWhileOwnerWatchLags replays a Deployment deleted and created
// again at once (the rollout e2e test) in the order the autoscaler may see
// it: the watch of the pods' controllers is apart from the pods' and may
// deliver the old Deployment's deletion after the new pods are found
// unschedulable. The passes in between must not grow the pool: the new
// pods wait until the tracker has seen their controllers (and so the
// deletion made before those were created), then wait for the old pods'
// room. A controller never seen holds its pods back OwnerWatchWait at most.
func TestRolloutWhileOwnerWatchLags(t *testing.T) {
	type step struct {
		// events fed to the tracker, in order: "add uid [controller-uid]"
		// (a Deployment when without a controller, else a ReplicaSet) or
		// "delete uid".
		events []string
		after  time.Duration // clock advance before the pass
		// pending pods of the pass: "name controller" (see onePodGPU).
		pending []string
		// wanted outcome of the pass
		increase  string // "gpu+N" or ""
		awaiting  int    // pods waiting for their controllers
		nominated int    // pods waiting for the old pods' room
		woken     bool   // the tracker woke the cluster during this step's events
	}
	const newRS = "apps/v1/ReplicaSet/rs-new"
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "new pods before the old Deployment's deletion: they wait, then wait for the old pods' room",
			steps: []step{
				{pending: []string{"new-0 " + newRS}, awaiting: 1},
				{pending: []string{"new-0 " + newRS, "new-1 " + newRS}, awaiting: 2},
				{
					events:  []string{"delete deploy-old", "add deploy-new", "add rs-new deploy-new"},
					pending: []string{"new-0 " + newRS, "new-1 " + newRS}, nominated: 2, woken: true,
				},
				{pending: []string{"new-0 " + newRS, "new-1 " + newRS, "new-2 " + newRS}, nominated: 3},
			},
		},
		{
			name: "the new ReplicaSet seen before its Deployment: still waiting",
			steps: []step{
				{events: []string{"add rs-new deploy-new"}, pending: []string{"new-0 " + newRS}, awaiting: 1},
				{events: []string{"delete deploy-old", "add deploy-new"}, pending: []string{"new-0 " + newRS}, nominated: 1, woken: true},
			},
		},
		{
			name: "controllers seen, old Deployment still there: the pods hold their room, scale-up at once",
			steps: []step{
				{events: []string{"add deploy-new", "add rs-new deploy-new"}, pending: []string{"new-0 " + newRS}, increase: "gpu+1"},
			},
		},
		{
			name: "controller never seen: the wait ends after OwnerWatchWait",
			steps: []step{
				{pending: []string{"new-0 " + newRS}, awaiting: 1},
				{after: OwnerWatchWait - time.Millisecond, pending: []string{"new-0 " + newRS}, awaiting: 1},
				{after: time.Millisecond, pending: []string{"new-0 " + newRS}, increase: "gpu+1"},
			},
		},
		{
			name: "a pod whose controller is of a kind not followed waits for nothing",
			steps: []step{
				{pending: []string{"new-0 argoproj.io/v1alpha1/Rollout/rollout-uid"}, increase: "gpu+1"},
			},
		},
		{
			name: "a pod without a controller waits for nothing",
			steps: []step{
				{pending: []string{"bare "}, increase: "gpu+1"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(ownersT0)
			woken := 0
			o := newOwnerTracker(clk, func() { woken++ })
			h := o.handler()
			h.OnAdd(ownerMeta("deploy-old", "", nil), true)
			h.OnAdd(ownerMeta("rs-old", "deploy-old", nil), true)
			st := &clusterState{}
			pools, machines, nodes, bound := rolloutCluster()
			for i, s := range tt.steps {
				before := woken
				for _, ev := range s.events {
					f := strings.Fields(ev)
					switch {
					case f[0] == "add" && len(f) == 2:
						h.OnAdd(ownerMeta(f[1], "", nil), false)
					case f[0] == "add":
						h.OnAdd(ownerMeta(f[1], f[2], nil), false)
					case f[0] == "delete":
						h.OnDelete(ownerMeta(f[1], "", nil))
					}
				}
				if got := woken > before; got != s.woken {
					t.Errorf("step %d: tracker woke the cluster: %v, want %v", i, got, s.woken)
				}
				clk.SetTime(clk.Now().Add(s.after))
				pods := append([]*corev1.Pod(nil), bound...)
				for _, p := range s.pending {
					f := strings.SplitN(p, " ", 2)
					pods = append(pods, onePodGPU(f[0], f[1], ""))
				}
				snap := decide.BuildSnapshot(nodes, decide.GroupPods(pods), machines, decide.Limits{})
				st.withOwners(&snap, o, clk.Now())
				plan := decide.ScaleUp(snap, pools, decide.Expander{}, clk.Now())
				var inc []string
				for _, in := range plan.Increases {
					inc = append(inc, fmt.Sprintf("%s+%d", in.Pool, in.Delta))
				}
				nominated := 0
				for _, pl := range plan.Schedulable {
					if pl.AwaitsTermination {
						nominated++
					}
				}
				if got := strings.Join(inc, ","); got != s.increase || len(plan.AwaitingOwners) != s.awaiting || nominated != s.nominated {
					t.Errorf("step %d: increases %q, awaiting owners %d, awaiting termination %d; want %q, %d, %d",
						i, got, len(plan.AwaitingOwners), nominated, s.increase, s.awaiting, s.nominated)
				}
				if len(plan.AwaitingOwners) > 0 && !plan.RecheckAt.Equal(st.ownerWaitSince[plan.AwaitingOwners[0].UID].Add(OwnerWatchWait)) {
					t.Errorf("step %d: RecheckAt %v, want the end of the wait", i, plan.RecheckAt)
				}
			}
		})
	}
}
