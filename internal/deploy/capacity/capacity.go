// Package capacity previews what a deploy will cost before anyone pays for
// it: the pods the new or changed workloads ask for are put, as pending
// pods, through the node autoscaler's own scale-up decision
// (internal/autoscaler/decide.ScaleUp) against a snapshot of the cluster's
// nodes, pools and instance types, and the nodes each autoscaled pool would
// add are priced from the instance types.
package capacity

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/autoscaler/decide"
)

// Change is one object a deploy creates or changes, as the server's dry
// run returned it (defaults filled in).
type Change struct {
	Object *unstructured.Unstructured
	// Existing is true when the object exists now (it changes rather than
	// appears): its current pods go away as the new ones come.
	Existing bool
	// Removed is true when the deploy deletes the object (--prune): its
	// pods go and none come.
	Removed bool
}

// PoolShrink is one autoscaled pool whose nodes the change leaves unneeded.
type PoolShrink struct {
	Pool         string   `json:"pool"`
	InstanceType string   `json:"instanceType"`
	Nodes        []string `json:"nodes"`
	PricePerHour float64  `json:"pricePerHour"`
	// SavingPerHour is len(Nodes) × PricePerHour.
	SavingPerHour float64 `json:"savingPerHour"`
	// After is how long the nodes must stay unneeded before the node
	// autoscaler removes them.
	After time.Duration `json:"after"`
}

// PoolGrowth is one autoscaled pool that would grow.
type PoolGrowth struct {
	Pool         string  `json:"pool"`
	InstanceType string  `json:"instanceType"`
	From         int     `json:"from"`
	Add          int     `json:"add"`
	PricePerHour float64 `json:"pricePerHour"`
	// CostPerHour is Add × PricePerHour.
	CostPerHour float64 `json:"costPerHour"`
	Pods        int     `json:"pods"`
}

// Estimate is the preview of one deploy.
type Estimate struct {
	// Pods is how many pods the new or changed workloads ask for.
	Pods int `json:"pods"`
	// FitNow is how many of them fit on nodes that exist or are coming.
	FitNow int          `json:"fitNow"`
	Grow   []PoolGrowth `json:"grow,omitempty"`
	// Free lists the nodes that become unneeded once the change is done
	// (old pods gone, new ones placed) and were not before.
	Free []PoolShrink `json:"free,omitempty"`
	// CostPerHour is the change in price per hour of all the pools: what
	// Grow adds less what Free saves.
	CostPerHour float64 `json:"costPerHour"`
	// NoRoom lists pods no pool can take, with the autoscaler's reason.
	NoRoom []string `json:"noRoom,omitempty"`
}

// PodsFor returns the pods the changes ask for (pure): replicas of
// Deployments, ReplicaSets and StatefulSets, a Job's parallelism, bare
// Pods. DaemonSets are left out (they never grow a pool). Each pod is
// pending (PodScheduled=False, Unschedulable) and named after its owner.
func PodsFor(changes []Change) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for _, c := range changes {
		if c.Removed {
			continue
		}
		tmpl, n, err := podTemplate(c.Object)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", c.Object.GetKind(), c.Object.GetName(), err)
		}
		for i := range n {
			p := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
			// What kube-apiserver's admission gives the real pods.
			decide.AddExtendedResourceTolerations(&p.Spec)
			p.Namespace = c.Object.GetNamespace()
			p.Name = fmt.Sprintf("%s-preview-%d", c.Object.GetName(), i)
			p.UID = types.UID("preview-" + p.Namespace + "-" + c.Object.GetKind() + "-" + p.Name)
			p.OwnerReferences = ownerOf(c.Object)
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			}}}
			out = append(out, p)
		}
	}
	return out, nil
}

// podTemplate returns the pod template of a workload and how many pods it
// runs at once; n is 0 for kinds that ask for no pods.
func podTemplate(u *unstructured.Unstructured) (tmpl corev1.PodTemplateSpec, n int, err error) {
	from := func(into any) error {
		return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
	}
	switch u.GroupVersionKind().GroupKind().String() {
	case "Deployment.apps":
		var d appsv1.Deployment
		err = from(&d)
		return d.Spec.Template, replicas(d.Spec.Replicas), err
	case "StatefulSet.apps":
		var s appsv1.StatefulSet
		err = from(&s)
		return s.Spec.Template, replicas(s.Spec.Replicas), err
	case "ReplicaSet.apps":
		var r appsv1.ReplicaSet
		err = from(&r)
		return r.Spec.Template, replicas(r.Spec.Replicas), err
	case "Job.batch":
		var j batchv1.Job
		err = from(&j)
		n = replicas(j.Spec.Parallelism)
		if j.Spec.Completions != nil {
			n = min(n, int(*j.Spec.Completions))
		}
		return j.Spec.Template, n, err
	case "Pod":
		var p corev1.Pod
		err = from(&p)
		return corev1.PodTemplateSpec{ObjectMeta: p.ObjectMeta, Spec: p.Spec}, 1, err
	}
	return tmpl, 0, nil
}

// ownerOf is the controller a workload's pods have (a Deployment's pods
// belong to its ReplicaSet): pods with one can be moved by a scale-down,
// bare pods cannot.
func ownerOf(u *unstructured.Unstructured) []metav1.OwnerReference {
	kind, apiVersion := u.GetKind(), u.GetAPIVersion()
	switch u.GroupVersionKind().GroupKind().String() {
	case "Deployment.apps":
		kind = "ReplicaSet"
	case "Pod":
		return nil
	}
	yes := true
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: u.GetName(), UID: types.UID("preview-" + u.GetName()), Controller: &yes}}
}

func replicas(r *int32) int {
	if r == nil {
		return 1
	}
	return int(*r)
}

// Without returns pods less those the changed workloads select: once the
// deploy is done they are replaced by the new ones (pure).
func Without(pods []*corev1.Pod, changes []Change) []*corev1.Pod {
	type sel struct {
		ns string
		s  labels.Selector
	}
	var sels []sel
	for _, c := range changes {
		if !c.Existing && !c.Removed {
			continue
		}
		m, found, err := unstructured.NestedMap(c.Object.Object, "spec", "selector")
		if err != nil || !found {
			continue
		}
		var ls metav1.LabelSelector
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ls) != nil {
			continue
		}
		if s, err := metav1.LabelSelectorAsSelector(&ls); err == nil && !s.Empty() {
			sels = append(sels, sel{c.Object.GetNamespace(), s})
		}
	}
	return slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool {
		for _, s := range sels {
			if p.Namespace == s.ns && s.s.Matches(labels.Set(p.Labels)) {
				return true
			}
		}
		return false
	})
}

// Preview runs the autoscaler's scale-up decision for pending on snap (the
// cluster without the pods the change replaces or removes) and pools, and
// its scale-down decision on base (the cluster as it is) and on snap with
// the pending pods placed, and prices the difference (pure).
func Preview(base, snap decide.Snapshot, pools []decide.Pool, types map[string]string, e decide.Expander, pending []*corev1.Pod, now time.Time) Estimate {
	snap.Pending = pending
	plan := decide.ScaleUp(snap, pools, e, now)
	est := Estimate{Pods: len(pending), FitNow: len(plan.Schedulable)}
	byName := map[string]decide.Pool{}
	for _, p := range pools {
		byName[p.Name] = p
	}
	for _, inc := range plan.Increases {
		p := byName[inc.Pool]
		g := PoolGrowth{
			Pool: inc.Pool, InstanceType: types[inc.Pool], From: p.Current + p.Upcoming, Add: inc.Delta,
			PricePerHour: p.PricePerHour, CostPerHour: float64(inc.Delta) * p.PricePerHour, Pods: len(inc.Pods),
		}
		est.Grow = append(est.Grow, g)
		est.CostPerHour += g.CostPerHour
	}
	sort.Slice(est.Grow, func(i, j int) bool { return est.Grow[i].Pool < est.Grow[j].Pool })
	est.NoRoom = noRoom(plan.NotTriggerScaleUp)
	est.Free = freed(base, snap, plan, pools, types, now)
	for _, f := range est.Free {
		est.CostPerHour -= f.SavingPerHour
	}
	return est
}

// Gather reads what the autoscaler would read for cluster cl (its pools,
// instance types and machines from the management API; nodes and pods from
// the tenant) and previews changes on it.
func Gather(ctx context.Context, mgmt client.Client, cl *fkev1.Cluster, tenant kubernetes.Interface, changes []Change, now time.Time) (Estimate, error) {
	var npl fkev1.NodePoolList
	if err := mgmt.List(ctx, &npl, client.InNamespace(cl.Namespace)); err != nil {
		return Estimate{}, fmt.Errorf("listing node pools: %w", err)
	}
	var pools []*fkev1.NodePool
	for i := range npl.Items {
		if np := &npl.Items[i]; np.Spec.ClusterName == cl.Name {
			pools = append(pools, np)
		}
	}
	var itl fkev1.InstanceTypeList
	if err := mgmt.List(ctx, &itl); err != nil {
		return Estimate{}, fmt.Errorf("listing instance types: %w", err)
	}
	types := map[string]*fkev1.InstanceType{}
	for i := range itl.Items {
		types[itl.Items[i].Name] = &itl.Items[i]
	}
	var ml fkev1.MachineList
	if err := mgmt.List(ctx, &ml, client.InNamespace(cl.Namespace), client.MatchingLabels{fkev1.LabelCluster: cl.Name}); err != nil {
		return Estimate{}, fmt.Errorf("listing machines: %w", err)
	}
	machines := make([]*fkev1.Machine, len(ml.Items))
	for i := range ml.Items {
		machines[i] = &ml.Items[i]
	}
	nl, err := tenant.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return Estimate{}, fmt.Errorf("listing nodes: %w", err)
	}
	nodes := make([]*corev1.Node, len(nl.Items))
	for i := range nl.Items {
		nodes[i] = &nl.Items[i]
	}
	pl, err := tenant.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Estimate{}, fmt.Errorf("listing pods: %w", err)
	}
	var pods []*corev1.Pod
	for i := range pl.Items {
		if p := &pl.Items[i]; p.Spec.NodeName != "" {
			pods = append(pods, p)
		}
	}
	pending, err := PodsFor(changes)
	if err != nil {
		return Estimate{}, err
	}
	dpools, _ := decide.BuildPools(pools, types, machines, nil, nil)
	limits := decide.Limits{MaxNodes: int(cl.Spec.Autoscaling.MaxNodes), MaxGPUs: int(cl.Spec.Autoscaling.MaxGPUs)}
	base := decide.BuildSnapshot(nodes, decide.GroupPods(pods), machines, limits)
	snap := decide.BuildSnapshot(nodes, decide.GroupPods(Without(pods, changes)), machines, limits)
	typeOf := map[string]string{}
	for _, np := range pools {
		typeOf[np.PoolName()] = np.Spec.InstanceType
	}
	return Preview(base, snap, dpools, typeOf, decide.Expander{Name: decide.ExpanderName(cl.Spec.Autoscaling.Expander)}, pending, now), nil
}

// FormatPrice writes a price per hour as the catalog does.
func FormatPrice(p float64) string { return strconv.FormatFloat(p, 'f', 2, 64) }

// freed returns, per pool, the nodes unneeded after the change that were
// not before: the scale-down decision on the cluster as it is and on the
// cluster once the change is done (old pods gone, new pods where the
// scale-up decision placed them). No node is removed in the plan until it
// has been unneeded for its pool's time; the nodes are reported with it.
func freed(base, after decide.Snapshot, plan decide.ScaleUpPlan, pools []decide.Pool, types map[string]string, now time.Time) []PoolShrink {
	if len(plan.Increases) > 0 {
		return nil // the autoscaler does not scale down while it grows
	}
	before := decide.ScaleDown(base, pools, nil, now).UnneededSince
	after.Pending = nil
	done := decide.ScaleDown(decide.WithPlacements(after, plan.Schedulable), pools, nil, now).UnneededSince
	byPool := map[string]*PoolShrink{}
	var out []PoolShrink
	for _, ni := range after.Nodes {
		name := ni.Node.Name
		if _, unneeded := done[name]; !unneeded {
			continue
		}
		if _, was := before[name]; was {
			continue
		}
		for _, p := range pools {
			if p.Name != ni.Pool {
				continue
			}
			ps := byPool[p.Name]
			if ps == nil {
				wait := p.ScaleDownUnneededTime
				if wait == 0 {
					wait = decide.DefaultScaleDownUnneededTime
				}
				ps = &PoolShrink{Pool: p.Name, InstanceType: types[p.Name], PricePerHour: p.PricePerHour, After: wait}
				byPool[p.Name] = ps
			}
			ps.Nodes = append(ps.Nodes, name)
			ps.SavingPerHour += p.PricePerHour
		}
	}
	for _, ps := range byPool {
		slices.Sort(ps.Nodes)
		out = append(out, *ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pool < out[j].Pool })
	return out
}

// noRoom words each distinct reason once, with the first pod and how many
// more share it.
func noRoom(rs []decide.PodReason) []string {
	var order []string
	pods := map[string][]string{}
	for _, r := range rs {
		if _, ok := pods[r.Reason]; !ok {
			order = append(order, r.Reason)
		}
		pods[r.Reason] = append(pods[r.Reason], r.Pod.Namespace+"/"+r.Pod.Name)
	}
	out := make([]string, 0, len(order))
	for _, reason := range order {
		who := "pod " + pods[reason][0]
		if n := len(pods[reason]) - 1; n > 0 {
			who += fmt.Sprintf(" (and %d more)", n)
		}
		out = append(out, who+": "+reason)
	}
	return out
}
