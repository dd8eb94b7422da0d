// Package autoscaler is fke's node autoscaler: Cluster Autoscaler semantics on
// NodePools with autoscaling enabled. The controller here gathers the state of
// a tenant cluster and acts on the plans of the pure decision code in decide/.
package autoscaler

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/autoscaler/decide"
	"fke.dev/fke/internal/autoscaler/poolsize"
	"fke.dev/fke/internal/index"
	"fke.dev/fke/internal/tenant"
)

// Defaults documented in the README.
const (
	DefaultScanInterval     = 10 * time.Second
	DefaultMaxProvisionTime = 15 * time.Minute
	// Backoff of a pool whose scale-up failed, doubling up to MaxBackoff.
	InitialBackoff = 30 * time.Second
	MaxBackoff     = 10 * time.Minute
	// SlowPass: a pass longer than this is logged with the time of each phase.
	SlowPass = 250 * time.Millisecond
)

// Reconciler runs the autoscaler for each Cluster that has autoscaled pools.
type Reconciler struct {
	Client   client.Client
	Tenants  *tenant.Registry
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	// Events receives tenant pod changes (see PodHandler).
	Events chan event.GenericEvent
	// Booked, when set, returns the tenant's pods whose capacity is booked
	// (ProvisioningRequests that are provisioned); they hold their room in
	// every decision.
	Booked func(ctx context.Context, t *tenant.Tenant) ([]*corev1.Pod, error)

	mu     sync.Mutex
	states map[string]*clusterState
	// podEvents carries pod events to a background sender, off the decision path.
	podEvents chan podEventReq
	// decisions carries scale decisions to a background writer of pool
	// status, in the order they were made.
	decisions chan decisionRecord
	// resizer writes the pools' sizes the passes decide, off the pass.
	resizer *resizer
	// owners follow each tenant's pod controllers (under mu).
	owners map[string]trackedOwners
}

// trackedOwners is the owner tracker of one tenant connection.
type trackedOwners struct {
	t *tenant.Tenant
	o *ownerTracker
}

// decisionRecord is a resize of a pool to record in its status; np is the
// record's own copy.
type decisionRecord struct {
	np       *fkev1.NodePool
	from, to int
	reason   string
	now      time.Time
}

type podEventReq struct {
	t  *tenant.Tenant
	ev *corev1.Event
}

// clusterState is what the autoscaler remembers between passes (not
// persisted: a restart only restarts the unneeded timers).
type clusterState struct {
	unneededSince map[string]time.Time
	backoffUntil  map[string]time.Time
	backoffStep   map[string]time.Duration
	podReasons    map[types.UID]string // last event reason+message sent per pod
	measured      map[types.UID]bool   // pods whose decision latency was recorded
	// memo keeps the parsed bound pods between passes.
	memo *decide.Memo
	// pending is the number of unschedulable pods the last pass found
	// (read by PodHandler under Reconciler.mu).
	pending int
	// retry lists pods whose scale-up could not be written: their events
	// and latency are to be recorded again (under Reconciler.mu).
	retry []types.UID
	// ownerWaitSince is when each pending pod was first found waiting for
	// its controllers to be seen (see ownerWaits).
	ownerWaitSince map[types.UID]time.Time
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Events == nil {
		r.Events = make(chan event.GenericEvent, 4096)
	}
	r.states = map[string]*clusterState{}
	r.owners = map[string]trackedOwners{}
	r.podEvents = make(chan podEventReq, 10000)
	r.decisions = make(chan decisionRecord, 1024)
	r.resizer = newResizer(r.Client, r.Clock)
	log := mgr.GetLogger().WithName("autoscaler")
	for _, run := range []func(context.Context) error{r.sendPodEvents, r.writeDecisions, r.resizer.run} {
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			return run(logr.NewContext(ctx, log))
		})); err != nil {
			return err
		}
	}
	toCluster := index.EnqueueCluster()
	return ctrl.NewControllerManagedBy(mgr).
		For(&fkev1.Cluster{}).
		Named("autoscaler").
		// Machines are not watched, nor the pools' status: their many
		// changes while nodes come up would keep the loop busy and delay
		// the pass a new unschedulable pod needs. A pass reads only the
		// pools' spec; upcoming machines are rechecked every 2 s.
		Watches(&fkev1.NodePool{}, toCluster, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.Events, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// PodHandler wakes the autoscaler of a cluster when one of its pods becomes
// unschedulable, and, while the cluster has unschedulable pods, when a pod
// is bound and not started: kube-scheduler may have given it the room a
// waiting pod was counted on, and that pod needs a decision now, not at
// the next scan.
func (r *Reconciler) PodHandler(clusterKey string, pod *corev1.Pod) {
	if !decide.Unschedulable(pod) && (!boundNotStarted(pod) || !r.hasPending(clusterKey)) {
		return
	}
	ns, name, err := toolscache.SplitMetaNamespaceKey(clusterKey)
	if err != nil || ns == "" {
		return
	}
	r.wake(ns, name)
}

// boundNotStarted reports whether kube-scheduler bound p and it has not
// started yet.
func boundNotStarted(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase == corev1.PodPending && p.DeletionTimestamp == nil
}

// hasPending reports whether the last pass over the cluster found
// unschedulable pods.
func (r *Reconciler) hasPending(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.states[key]
	return ok && st.pending > 0
}

func (r *Reconciler) state(key string) *clusterState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.states[key]
	if !ok {
		st = &clusterState{
			unneededSince: map[string]time.Time{}, backoffUntil: map[string]time.Time{}, backoffStep: map[string]time.Duration{},
			podReasons: map[types.UID]string{}, measured: map[types.UID]bool{}, memo: decide.NewMemo(),
		}
		r.states[key] = st
	}
	return st
}

// prune forgets the per-pod records of pods that no longer exist, once they
// outnumber the live pods (n of them), so a long-lived cluster's churn does
// not pile up.
func (st *clusterState) prune(n int, live func(types.UID) bool) {
	if len(st.podReasons)+len(st.measured) <= 2*n+1000 {
		return
	}
	for uid := range st.podReasons {
		if !live(uid) {
			delete(st.podReasons, uid)
		}
	}
	for uid := range st.measured {
		if !live(uid) {
			delete(st.measured, uid)
		}
	}
}

// Reconcile makes one autoscaling pass over a cluster.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := r.Clock.Now()
	key := req.String()
	cl := &fkev1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cl); err != nil {
		if apierrors.IsNotFound(err) {
			r.mu.Lock()
			delete(r.states, key)
			delete(r.owners, key)
			r.mu.Unlock()
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	scan := DefaultScanInterval
	if d := cl.Spec.Autoscaling.ScanInterval; d != nil && d.Duration > 0 {
		scan = d.Duration
	}
	if !cl.DeletionTimestamp.IsZero() || !meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionReady) {
		return ctrl.Result{}, nil
	}
	in, err := r.gather(ctx, cl)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(in.pools) == 0 {
		return ctrl.Result{}, nil
	}
	st := r.state(key)
	r.takeRetries(st)
	st.prune(in.tenant.PodIndex.Len(), in.tenant.PodIndex.Has)
	now := r.Clock.Now()

	if err := r.handleFailedMachines(ctx, cl, in, st, now); err != nil {
		return ctrl.Result{}, err
	}
	gathered := r.Clock.Now()
	pools, views := decide.BuildPools(in.pools, in.types, in.machines, st.backoffUntil, r.resizer.Desired)
	snap := decide.BuildSnapshot(in.nodes, in.pods, in.machines, decide.Limits{MaxNodes: int(cl.Spec.Autoscaling.MaxNodes), MaxGPUs: int(cl.Spec.Autoscaling.MaxGPUs)})
	snap.PDBs = in.pdbs
	snap.Memo = st.memo
	snap.Booked = in.booked
	st.withOwners(&snap, in.owners, now)
	unschedulablePods.WithLabelValues(key).Set(float64(len(snap.Pending)))
	r.mu.Lock()
	st.pending = len(snap.Pending)
	r.mu.Unlock()

	expander := decide.Expander{Name: decide.ExpanderName(cl.Spec.Autoscaling.Expander)}
	plan := decide.ScaleUp(snap, pools, expander, now)
	decided := r.Clock.Now()
	r.applyScaleUp(ctx, cl, in.tenant, plan, views, st, decide.StartingNodes(in.nodes, plan.Schedulable), now)
	applied := r.Clock.Now()

	requeue := scan
	upcoming := false
	for _, p := range pools {
		upcoming = upcoming || p.Upcoming > 0
	}
	if len(plan.AwaitingOwners) > 0 {
		// Decided again once their controllers are seen (the tracker wakes
		// the cluster) or their wait is over (RecheckAt); nothing is scaled
		// down meanwhile, as while machines come up.
		logr.FromContextOrDiscard(ctx).V(1).Info("pods wait for their controllers to be seen", "cluster", key, "pods", len(plan.AwaitingOwners))
	}
	if len(plan.Increases) == 0 && !upcoming && len(plan.AwaitingOwners) == 0 {
		sd := decide.ScaleDown(decide.WithPlacements(snap, plan.Schedulable), pools, st.unneededSince, now)
		st.unneededSince = sd.UnneededSince
		unneededNodes.WithLabelValues(key).Set(float64(len(sd.UnneededSince)))
		if err := r.applyScaleDown(ctx, cl, sd, views, now); err != nil {
			return ctrl.Result{}, err
		}
		for node, since := range sd.UnneededSince {
			if p := poolOfNode(snap, node, pools); p != nil {
				wait := effectiveUnneeded(p) - now.Sub(since)
				if wait > 0 && wait < requeue {
					requeue = wait + 50*time.Millisecond
				}
			}
		}
	} else if upcoming {
		requeue = min(requeue, 2*time.Second)
	}
	if !plan.RecheckAt.IsZero() {
		// Pods wait for room that terminating pods free (once the first of
		// those is past its deadline, its room counts as used again), or
		// for their controllers to be seen.
		requeue = min(requeue, max(plan.RecheckAt.Sub(now), 0)+50*time.Millisecond)
	}
	took := r.Clock.Since(start)
	loopDuration.WithLabelValues(key).Observe(took.Seconds())
	if took > SlowPass {
		logr.FromContextOrDiscard(ctx).Info("slow autoscaler pass", "cluster", key, "took", took,
			"gather", gathered.Sub(start), "decide", decided.Sub(gathered), "applyScaleUp", applied.Sub(decided),
			"scaleDown", r.Clock.Since(applied), "pending", len(snap.Pending), "increases", len(plan.Increases))
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// input is everything one pass reads.
type input struct {
	tenant   *tenant.Tenant
	pools    []*fkev1.NodePool
	types    map[string]*fkev1.InstanceType
	machines []*fkev1.Machine
	nodes    []*corev1.Node
	pods     decide.PodGroups
	pdbs     []policyv1.PodDisruptionBudget
	booked   []*corev1.Pod
	// owners follows the pods' controllers; nil when they cannot be
	// watched (only pods already terminating then count as leaving).
	owners *ownerTracker
}

func (r *Reconciler) gather(ctx context.Context, cl *fkev1.Cluster) (*input, error) {
	in := &input{types: map[string]*fkev1.InstanceType{}}
	var pools fkev1.NodePoolList
	if err := r.Client.List(ctx, &pools, index.OfCluster(cl.Namespace, cl.Name)...); err != nil {
		return nil, fmt.Errorf("listing node pools: %w", err)
	}
	for i := range pools.Items {
		if np := &pools.Items[i]; np.Spec.Autoscaling != nil && !np.Legacy() {
			in.pools = append(in.pools, np)
		}
	}
	if len(in.pools) == 0 {
		return in, nil
	}
	var its fkev1.InstanceTypeList
	if err := r.Client.List(ctx, &its); err != nil {
		return nil, fmt.Errorf("listing instance types: %w", err)
	}
	for i := range its.Items {
		in.types[its.Items[i].Name] = &its.Items[i]
	}
	// Machines are read from the cache without copies; the two places that
	// patch one copy it first (see markForRemoval).
	var ms fkev1.MachineList
	if err := r.Client.List(ctx, &ms, append(index.OfCluster(cl.Namespace, cl.Name), client.UnsafeDisableDeepCopy)...); err != nil {
		return nil, fmt.Errorf("listing machines: %w", err)
	}
	for i := range ms.Items {
		in.machines = append(in.machines, &ms.Items[i])
	}
	t, err := r.Tenants.Get(ctx, client.ObjectKeyFromObject(cl).String())
	if err != nil {
		return nil, err
	}
	in.tenant = t
	// The decision code only reads: take the cache's objects without copies
	// (30,000 pods would otherwise be copied on every pass), grouped by node
	// as the pod index keeps them.
	if in.nodes, err = t.Nodes(ctx); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	in.pods.ByNode, in.pods.Unbound = t.PodIndex.Grouped()
	if r.Booked != nil {
		if in.booked, err = r.Booked(ctx, t); err != nil {
			return nil, err
		}
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := t.Client.List(ctx, &pdbs); err != nil {
		return nil, fmt.Errorf("listing pod disruption budgets: %w", err)
	}
	in.pdbs = pdbs.Items
	// Read after the pods (see withOwners), so that what it has seen of
	// their controllers can be checked against them.
	in.owners = r.ownerTracker(ctx, t)
	return in, nil
}

// withOwners sets snap's LeavingOwners and AwaitingOwners from one view of
// the owner tracker o (neither when o is nil), as of now.
func (st *clusterState) withOwners(snap *decide.Snapshot, o *ownerTracker, now time.Time) {
	if o == nil {
		return
	}
	leaving, unseen := o.View(snap.Pending)
	snap.LeavingOwners = leaving
	snap.AwaitingOwners = st.ownerWaits(unseen, now)
}

// ownerWaits returns, for the pending pods whose controllers the owner
// tracker has not seen yet (unseen, by pod UID, see UnseenController), the
// time until which each waits for them before it may grow a pool:
// OwnerWatchWait after the pass that first found it so. It forgets the
// pods no longer waiting.
func (st *clusterState) ownerWaits(unseen map[types.UID]types.UID, now time.Time) map[types.UID]time.Time {
	if len(unseen) == 0 {
		st.ownerWaitSince = nil
		return nil
	}
	since := make(map[types.UID]time.Time, len(unseen))
	until := make(map[types.UID]time.Time, len(unseen))
	for pod := range unseen {
		t, ok := st.ownerWaitSince[pod]
		if !ok {
			t = now
		}
		since[pod] = t
		until[pod] = t.Add(OwnerWatchWait)
	}
	st.ownerWaitSince = since
	return until
}

// ownerTracker returns the tracker of t's pod controllers, made and
// synced on first use; nil (logged) when it cannot watch them, and the
// pass goes on counting only pods that are already terminating.
func (r *Reconciler) ownerTracker(ctx context.Context, t *tenant.Tenant) *ownerTracker {
	r.mu.Lock()
	tr, ok := r.owners[t.Key]
	r.mu.Unlock()
	if ok && tr.t == t {
		return tr.o
	}
	// Seeing a controller that pending pods wait for wakes their cluster.
	var seen func()
	if ns, name, err := toolscache.SplitMetaNamespaceKey(t.Key); err == nil && ns != "" {
		seen = func() { r.wake(ns, name) }
	}
	o := newOwnerTracker(r.Clock, seen)
	if err := o.watch(ctx, t.Cache); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "cannot follow pod controllers; only terminating pods count as leaving", "cluster", t.Key)
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.owners == nil {
		r.owners = map[string]trackedOwners{}
	}
	r.owners[t.Key] = trackedOwners{t: t, o: o}
	return o
}

// applyScaleUp asks for the pools' new sizes; pods and pools are told why
// once each size is written (see resizer), so the pass does not wait for it.
func (r *Reconciler) applyScaleUp(ctx context.Context, cl *fkev1.Cluster, t *tenant.Tenant, plan decide.ScaleUpPlan, views map[string]*decide.PoolView, st *clusterState, starting map[string]bool, now time.Time) {
	key := client.ObjectKeyFromObject(cl).String()
	decided := r.Clock.Now()
	// A pod that fits a machine already coming up, a node that is Ready
	// but not yet untainted (starting), or room that pods terminating on a
	// node will free, was helped by an earlier decision or waits for that
	// room: say what it waits for (Karpenter's "Nominated"). A pod that fits
	// a usable node needs nothing: kube-scheduler will place it.
	for _, pl := range plan.Schedulable {
		var msg string
		switch {
		case pl.AwaitsTermination && pl.Pool != "":
			msg = fmt.Sprintf("pod fits node %s of pool %s once the pods terminating there are gone", pl.Node, pl.Pool)
		case pl.AwaitsTermination:
			msg = fmt.Sprintf("pod fits node %s once the pods terminating there are gone", pl.Node)
		case pl.Upcoming:
			msg = fmt.Sprintf("pod fits a node of pool %s that is coming up", pl.Pool)
		case starting[pl.Node] && pl.Pool != "":
			msg = fmt.Sprintf("pod fits node %s of pool %s, which is coming up", pl.Node, pl.Pool)
		case starting[pl.Node]:
			msg = fmt.Sprintf("pod fits node %s, which is coming up", pl.Node)
		default:
			continue
		}
		measure(key, st.toMeasure([]*corev1.Pod{pl.Pod}), decided)
		r.emit(st, r.podEvent(t, st, pl.Pod, corev1.EventTypeNormal, "Nominated", msg), decided)
	}
	for _, inc := range plan.Increases {
		v := views[inc.Pool]
		if v == nil || inc.Delta <= 0 {
			continue
		}
		from := v.Desired
		to := min(from+inc.Delta, int(v.Pool.Spec.Autoscaling.MaxSize))
		if to <= from {
			continue
		}
		reason := fmt.Sprintf("%d unschedulable pods need %d more %s nodes", len(inc.Pods), to-from, v.InstanceType.Name)
		logr.FromContextOrDiscard(ctx).Info("scale-up", "cluster", key, "pool", inc.Pool, "from", from, "to", to,
			"pods", len(inc.Pods), "liveMachines", len(v.Live), "schedulableElsewhere", len(plan.Schedulable))
		msg := fmt.Sprintf("pod triggered scale-up: [{%s %d->%d (max: %d)}]", inc.Pool, from, to, v.Pool.Spec.Autoscaling.MaxSize)
		events := make([]*pendingEvent, 0, len(inc.Pods))
		for _, p := range inc.Pods {
			events = append(events, r.podEvent(t, st, p, corev1.EventTypeNormal, "TriggeredScaleUp", msg))
		}
		pods := st.toMeasure(inc.Pods)
		pool := inc.Pool
		waiting := make([]types.UID, len(inc.Pods))
		for i, p := range inc.Pods {
			waiting[i] = p.UID
		}
		r.resize(cl, v.Pool, from, to, reason, now, func(_ context.Context, np *fkev1.NodePool, at time.Time) {
			scaleUps.WithLabelValues(key, pool).Add(float64(to - from))
			measure(key, pods, at)
			for _, ev := range events {
				r.emit(st, ev, at)
			}
			r.Recorder.Eventf(np, nil, corev1.EventTypeNormal, "TriggeredScaleUp", "ScaleUp", "%s (%d → %d)", reason, from, to)
		}, func() { r.retryLater(st, waiting...) })
		v.Desired = to
	}
	for _, pr := range plan.NotTriggerScaleUp {
		r.emit(st, r.podEvent(t, st, pr.Pod, corev1.EventTypeNormal, "NotTriggerScaleUp", pr.Reason), decided)
	}
}

// recordDecision queues a decision for the pool's status; a full queue
// writes it at once. The pool is the record's own: nothing else modifies it.
func (r *Reconciler) recordDecision(ctx context.Context, rec decisionRecord) {
	select {
	case r.decisions <- rec:
	default:
		r.writeDecision(ctx, rec)
	}
}

// writeDecisions writes queued decisions into the pools' status until ctx ends.
func (r *Reconciler) writeDecisions(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case rec := <-r.decisions:
			r.writeDecision(ctx, rec)
		}
	}
}

func (r *Reconciler) writeDecision(ctx context.Context, rec decisionRecord) {
	if err := poolsize.RecordDecision(ctx, r.Client, rec.np, rec.from, rec.to, rec.reason, rec.now); err != nil && !apierrors.IsNotFound(err) {
		logr.FromContextOrDiscard(ctx).Error(err, "scale decision not recorded", "pool", rec.np.Name)
	}
}

// toMeasure returns the pods whose decision latency is not yet recorded,
// and marks them recorded.
func (st *clusterState) toMeasure(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if !st.measured[p.UID] {
			st.measured[p.UID] = true
			out = append(out, p)
		}
	}
	return out
}

// measure records, for pods (see toMeasure), the time from each turning
// unschedulable to the decision that helps it, in effect at at.
func measure(key string, pods []*corev1.Pod, at time.Time) {
	for _, p := range pods {
		decisionLatency.WithLabelValues(key).Observe(at.Sub(decide.UnschedulableSince(p)).Seconds())
	}
}

// retryLater makes the next pass record the pods' events and latency again
// (their scale-up was not written, or an event was not queued).
func (r *Reconciler) retryLater(st *clusterState, pods ...types.UID) {
	r.mu.Lock()
	st.retry = append(st.retry, pods...)
	r.mu.Unlock()
}

// takeRetries forgets what was recorded for the pods retryLater names.
func (r *Reconciler) takeRetries(st *clusterState) {
	r.mu.Lock()
	retry := st.retry
	st.retry = nil
	r.mu.Unlock()
	for _, uid := range retry {
		delete(st.podReasons, uid)
		delete(st.measured, uid)
	}
}

// applyScaleDown marks the chosen machines and lowers their pools' replicas;
// the NodePool controller removes the marked machines (drained first).
func (r *Reconciler) applyScaleDown(ctx context.Context, cl *fkev1.Cluster, sd decide.ScaleDownPlan, views map[string]*decide.PoolView, now time.Time) error {
	byPool := map[string][]decide.NodeRemoval{}
	for _, rm := range sd.Remove {
		byPool[rm.Pool] = append(byPool[rm.Pool], rm)
	}
	pools := make([]string, 0, len(byPool))
	for p := range byPool {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	key := client.ObjectKeyFromObject(cl).String()
	for _, name := range pools {
		v := views[name]
		if v == nil {
			continue
		}
		marked := 0
		var nodes []string
		for _, rm := range byPool[name] {
			for _, m := range v.Live {
				if m.Status.NodeName != rm.Node || m.Annotations[fkev1.AnnotationScaleDown] == "true" {
					continue
				}
				if _, err := r.markForRemoval(ctx, m); err != nil {
					return err
				}
				marked++
				nodes = append(nodes, rm.Node)
			}
		}
		if marked == 0 {
			continue
		}
		to := max(v.Desired-marked, int(v.Pool.Spec.Autoscaling.MinSize))
		reason := fmt.Sprintf("nodes %s unneeded", strings.Join(nodes, ", "))
		from := v.Desired
		r.resize(cl, v.Pool, from, to, reason, now, func(_ context.Context, np *fkev1.NodePool, _ time.Time) {
			scaleDowns.WithLabelValues(key, name).Add(float64(from - to))
			r.Recorder.Eventf(np, nil, corev1.EventTypeNormal, "ScaleDown", "ScaleDown", "%s (%d → %d)", reason, from, to)
		}, nil)
		v.Desired = to
	}
	return nil
}

// markForRemoval annotates a machine so the NodePool controller removes it
// first when the pool shrinks, and returns the patched machine. m is the
// cache's object: it is not modified.
func (r *Reconciler) markForRemoval(ctx context.Context, m *fkev1.Machine) (*fkev1.Machine, error) {
	mc := m.DeepCopy()
	if mc.Annotations == nil {
		mc.Annotations = map[string]string{}
	}
	mc.Annotations[fkev1.AnnotationScaleDown] = "true"
	if err := r.Client.Patch(ctx, mc, client.MergeFrom(m)); err != nil {
		return nil, fmt.Errorf("marking machine %s for removal: %w", m.Name, err)
	}
	return mc, nil
}

// resize asks the resizer to set the pool's size from → to, a decision
// made at now. Once the size is written, done (if any) runs and the
// decision is recorded in the pool's status; if the write fails, failed (if
// any) runs and the cluster's autoscaler is woken to decide again.
func (r *Reconciler) resize(cl *fkev1.Cluster, np *fkev1.NodePool, from, to int, reason string, now time.Time,
	done func(ctx context.Context, np *fkev1.NodePool, at time.Time), failed func()) {
	r.resizer.Resize(np, to, func(ctx context.Context, written *fkev1.NodePool, at time.Time, err error) {
		if err != nil {
			if failed != nil {
				failed()
			}
			r.wake(cl.Namespace, cl.Name)
			return
		}
		if done != nil {
			done(ctx, written, at)
		}
		r.recordDecision(ctx, decisionRecord{np: written, from: from, to: to, reason: reason, now: now})
	})
}

// wake asks for a pass over the cluster namespace/name; when the queue is
// full, a pass is coming anyway.
func (r *Reconciler) wake(namespace, name string) {
	select {
	case r.Events <- event.GenericEvent{Object: &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}:
	default:
	}
}

// handleFailedMachines backs off pools whose machines could not be made
// (InsufficientCapacity) or did not become ready within the max provision
// time, and removes those machines so another pool can be tried.
func (r *Reconciler) handleFailedMachines(ctx context.Context, cl *fkev1.Cluster, in *input, st *clusterState, now time.Time) error {
	pools := map[string]*fkev1.NodePool{}
	for _, np := range in.pools {
		pools[np.PoolName()] = np
	}
	for i, m := range in.machines {
		np := pools[m.Spec.NodePoolName]
		if np == nil || !m.DeletionTimestamp.IsZero() || m.Annotations[fkev1.AnnotationScaleDown] == "true" ||
			meta.IsStatusConditionTrue(m.Status.Conditions, fkev1.ConditionReady) {
			continue
		}
		maxProvision := DefaultMaxProvisionTime
		if d := np.Spec.Autoscaling.MaxProvisionTime; d != nil && d.Duration > 0 {
			maxProvision = d.Duration
		}
		var why string
		if c := meta.FindStatusCondition(m.Status.Conditions, fkev1.ConditionProvisioned); c != nil && c.Status == metav1.ConditionFalse && c.Reason == fkev1.ReasonInsufficientCapacity {
			why = "insufficient capacity: " + c.Message
		} else if now.Sub(m.CreationTimestamp.Time) > maxProvision {
			why = fmt.Sprintf("machine %s not ready after %s", m.Name, maxProvision)
		}
		if why == "" {
			continue
		}
		step := st.backoffStep[np.PoolName()]
		if step == 0 {
			step = InitialBackoff
		} else {
			step = min(2*step, MaxBackoff)
		}
		st.backoffStep[np.PoolName()] = step
		st.backoffUntil[np.PoolName()] = now.Add(step)
		r.Recorder.Eventf(np, nil, corev1.EventTypeWarning, "ScaleUpFailed", "ScaleUp", "%s; backing off the pool for %s", why, step)
		marked, err := r.markForRemoval(ctx, m)
		if err != nil {
			return err
		}
		in.machines[i] = marked // the rest of the pass sees it as being removed
		cur := r.resizer.Desired(np)
		r.resize(cl, np, cur, max(cur-1, int(np.Spec.Autoscaling.MinSize)), why, now, nil, nil)
	}
	return nil
}

// pendingEvent is a pod event decided in a pass, recorded by emit.
type pendingEvent struct {
	t                 *tenant.Tenant
	ref               corev1.ObjectReference
	kind, reason, msg string
}

// podEvent returns the event to record on a tenant pod, or nil when the pod
// already has one with this reason and message.
func (r *Reconciler) podEvent(t *tenant.Tenant, st *clusterState, p *corev1.Pod, kind, reason, msg string) *pendingEvent {
	if st.podReasons[p.UID] == reason+msg {
		return nil
	}
	st.podReasons[p.UID] = reason + msg
	ref := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion}
	return &pendingEvent{t: t, ref: ref, kind: kind, reason: reason, msg: msg}
}

// emit queues ev (if any), stamped at, for the background sender. When the
// queue is full the next pass records it again.
func (r *Reconciler) emit(st *clusterState, ev *pendingEvent, at time.Time) {
	if ev == nil {
		return
	}
	req := podEventReq{t: ev.t, ev: tenant.NewEvent(ev.ref, ev.kind, ev.reason, ev.msg, "fke.dev/autoscaler", at)}
	select {
	case r.podEvents <- req:
	default:
		r.retryLater(st, ev.ref.UID)
	}
}

// sendPodEvents creates queued pod events until ctx ends.
func (r *Reconciler) sendPodEvents(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case req := <-r.podEvents:
			if _, err := req.t.Clientset.CoreV1().Events(req.ev.Namespace).Create(ctx, req.ev, metav1.CreateOptions{}); err != nil {
				logr.FromContextOrDiscard(ctx).V(1).Info("pod event not recorded", "pod", req.ev.InvolvedObject.Name, "error", err.Error())
			}
		}
	}
}

func poolOfNode(s decide.Snapshot, node string, pools []decide.Pool) *decide.Pool {
	for _, n := range s.Nodes {
		if n.Node.Name != node {
			continue
		}
		for i := range pools {
			if pools[i].Name == n.Pool {
				return &pools[i]
			}
		}
	}
	return nil
}

func effectiveUnneeded(p *decide.Pool) time.Duration {
	if p.ScaleDownUnneededTime > 0 {
		return p.ScaleDownUnneededTime
	}
	return decide.DefaultScaleDownUnneededTime
}
