// Package provreq serves the ProvisioningRequest API (autoscaling.x-k8s.io/v1)
// in tenant clusters, so Kueue's ProvisioningRequest admission check drives
// fke unchanged: check-capacity requests are answered from the current
// cluster state; best-effort-atomic-scale-up requests grow one NodePool by
// all the nodes the request's pods need, in one step, or by none.
//
// The decisions are pure (Decide); the Reconciler gathers a cluster's state,
// applies decisions and records them on the requests.
package provreq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/autoscaler/decide"
	"fke.dev/fke/internal/autoscaler/poolsize"
	provreqv1 "fke.dev/fke/internal/autoscaler/provreq/v1"
	"fke.dev/fke/internal/index"
	"fke.dev/fke/internal/tenant"
)

// AddToScheme adds the ProvisioningRequest kinds (autoscaling.x-k8s.io/v1)
// to a scheme; the tenant registry's scheme needs them.
var AddToScheme = provreqv1.AddToScheme

// NoAPIRecheckInterval is how often a cluster whose ProvisioningRequest CRD
// is not installed yet is looked at again.
const NoAPIRecheckInterval = 15 * time.Second

// Reconciler serves ProvisioningRequests, one pass per Cluster.
type Reconciler struct {
	// Client reads and writes the management API (NodePools, Machines).
	Client  client.Client
	Tenants *tenant.Registry
	// Recorder records events on NodePools (management API); events on
	// ProvisioningRequests go to the tenant cluster.
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	// Events receives tenant ProvisioningRequest changes; created by
	// SetupWithManager when nil.
	Events chan event.GenericEvent

	mu      sync.Mutex
	watched map[string]*tenant.Tenant // tenants whose ProvisioningRequest informer has our handler
}

// SetupWithManager registers the controller under the name "provisioningrequest".
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Events == nil {
		r.Events = make(chan event.GenericEvent, 1024)
	}
	toCluster := index.EnqueueCluster()
	return ctrl.NewControllerManagedBy(mgr).
		For(&fkev1.Cluster{}).
		Named("provisioningrequest").
		Watches(&fkev1.NodePool{}, toCluster).
		Watches(&fkev1.Machine{}, toCluster).
		WatchesRawSource(source.Channel(r.Events, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// Reconcile makes one pass over the ProvisioningRequests of a cluster.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := req.String()
	cl := &fkev1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cl); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(key)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cl.DeletionTimestamp.IsZero() || !meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionReady) {
		return ctrl.Result{}, nil
	}
	t, err := r.Tenants.Get(ctx, key)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.watch(ctx, key, t); err != nil {
		if meta.IsNoMatchError(err) {
			logr.FromContextOrDiscard(ctx).V(1).Info("ProvisioningRequest API not installed in tenant yet", "cluster", key)
			return ctrl.Result{RequeueAfter: NoAPIRecheckInterval}, nil
		}
		return ctrl.Result{}, err
	}
	var list provreqv1.ProvisioningRequestList
	if err := t.Client.List(ctx, &list); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing provisioning requests: %w", err)
	}
	var open []*provreqv1.ProvisioningRequest
	for i := range list.Items {
		if pr := &list.Items[i]; pr.DeletionTimestamp.IsZero() && !Final(pr) {
			open = append(open, pr)
		}
	}
	if len(open) == 0 {
		return ctrl.Result{}, nil
	}
	sort.Slice(open, func(i, j int) bool {
		a, b := open[i], open[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})

	all := make([]*provreqv1.ProvisioningRequest, len(list.Items))
	for i := range list.Items {
		all[i] = &list.Items[i]
	}
	st, err := r.gather(ctx, cl, t, all)
	if err != nil {
		return ctrl.Result{}, err
	}
	var requeue time.Duration
	for _, pr := range open {
		pods, podsErr := r.podsFor(ctx, t, pr)
		now := r.Clock.Now()
		d := Decide(Input{Request: pr, Pods: pods, PodsError: podsErr, Snapshot: st.snapshot, Pools: st.pools, Replicas: st.replicas, Now: now})
		if err := r.apply(ctx, t, pr, pods, d, st, now); err != nil {
			return ctrl.Result{}, err
		}
		if d.RequeueAfter > 0 && (requeue == 0 || d.RequeueAfter < requeue) {
			requeue = d.RequeueAfter
		}
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// state is the cluster as one pass sees it; apply keeps it current as
// pools grow, so later requests of the pass see earlier bookings.
type state struct {
	nodePools map[string]*fkev1.NodePool
	pools     []decide.Pool
	replicas  map[string]int
	snapshot  decide.Snapshot
}

// gather reads the cluster's state; prs are all its ProvisioningRequests.
func (r *Reconciler) gather(ctx context.Context, cl *fkev1.Cluster, t *tenant.Tenant, prs []*provreqv1.ProvisioningRequest) (*state, error) {
	st := &state{nodePools: map[string]*fkev1.NodePool{}, replicas: map[string]int{}}
	var npl fkev1.NodePoolList
	if err := r.Client.List(ctx, &npl, index.OfCluster(cl.Namespace, cl.Name)...); err != nil {
		return nil, fmt.Errorf("listing node pools: %w", err)
	}
	var pools []*fkev1.NodePool
	for i := range npl.Items {
		if np := &npl.Items[i]; np.Spec.Autoscaling != nil && !np.Legacy() {
			pools = append(pools, np)
			st.nodePools[np.PoolName()] = np
		}
	}
	var its fkev1.InstanceTypeList
	if err := r.Client.List(ctx, &its); err != nil {
		return nil, fmt.Errorf("listing instance types: %w", err)
	}
	itypes := map[string]*fkev1.InstanceType{}
	for i := range its.Items {
		itypes[its.Items[i].Name] = &its.Items[i]
	}
	var ml fkev1.MachineList
	if err := r.Client.List(ctx, &ml, index.OfCluster(cl.Namespace, cl.Name)...); err != nil {
		return nil, fmt.Errorf("listing machines: %w", err)
	}
	machines := make([]*fkev1.Machine, len(ml.Items))
	for i := range ml.Items {
		machines[i] = &ml.Items[i]
	}
	// Nodes and pods are read from the informer store without copies; the
	// decision code only reads them.
	nodes, err := t.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	pods, err := t.Pods(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	st.pools, _ = decide.BuildPools(pools, itypes, machines, nil, nil)
	for _, p := range st.pools {
		st.replicas[p.Name] = st.nodePools[p.Name].DesiredReplicas()
	}
	st.snapshot = decide.BuildSnapshot(nodes, decide.GroupPods(pods), machines, decide.Limits{
		MaxNodes: int(cl.Spec.Autoscaling.MaxNodes), MaxGPUs: int(cl.Spec.Autoscaling.MaxGPUs),
	})
	if st.snapshot.Booked, err = bookedIn(ctx, t, prs, pods); err != nil {
		return nil, err
	}
	return st, nil
}

// podsFor reads the request's PodTemplates and builds its pods; the
// string is the reason when that is not possible.
func (r *Reconciler) podsFor(ctx context.Context, t *tenant.Tenant, pr *provreqv1.ProvisioningRequest) ([]*corev1.Pod, string) {
	templates := map[string]*corev1.PodTemplate{}
	for _, set := range pr.Spec.PodSets {
		name := set.PodTemplateRef.Name
		if _, ok := templates[name]; ok {
			continue
		}
		pt, err := podTemplate(ctx, t, pr.Namespace, name)
		if err != nil {
			return nil, err.Error()
		}
		templates[name] = pt
	}
	pods, err := PodsFor(pr, templates)
	if err != nil {
		return nil, err.Error()
	}
	return pods, ""
}

// apply carries out a decision about pr (whose pods are pods): booking
// annotation, resize, conditions, events. Writes use optimistic locking, so a decision made on a stale
// cache fails with a conflict and is made again on the next pass.
func (r *Reconciler) apply(ctx context.Context, t *tenant.Tenant, pr *provreqv1.ProvisioningRequest, pods []*corev1.Pod, d Decision, st *state, now time.Time) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("cluster", t.Key, "provisioningRequest", pr.Namespace+"/"+pr.Name)
	if d.Booking != nil {
		patch := client.MergeFromWithOptions(pr.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if pr.Annotations == nil {
			pr.Annotations = map[string]string{}
		}
		pr.Annotations[AnnotationBooking] = d.Booking.String()
		if err := t.Client.Patch(ctx, pr, patch); err != nil {
			return fmt.Errorf("booking %s/%s: %w", pr.Namespace, pr.Name, err)
		}
	}
	if rs := d.Resize; rs != nil {
		np := st.nodePools[rs.Pool]
		if np == nil {
			return fmt.Errorf("node pool %s of %s/%s not found", rs.Pool, pr.Namespace, pr.Name)
		}
		log.Info("atomic scale-up", "pool", rs.Pool, "from", rs.From, "to", rs.To)
		// Optimistically locked: a stale pool is never resized.
		lock := client.MergeFromWithOptimisticLock{}
		if err := poolsize.Resize(ctx, r.Client, np, rs.To, rs.Reason, now, lock); err != nil {
			return err
		}
		if r.Recorder != nil {
			r.Recorder.Eventf(np, nil, corev1.EventTypeNormal, "TriggeredScaleUp", "ScaleUp", "%s (%d → %d)", rs.Reason, rs.From, rs.To)
		}
		for i := range st.pools {
			if st.pools[i].Name == rs.Pool {
				st.pools[i].Upcoming += rs.To - st.replicas[rs.Pool]
			}
		}
		st.replicas[rs.Pool] = rs.To
	}
	if len(d.Conditions) > 0 {
		patch := client.MergeFromWithOptions(pr.DeepCopy(), client.MergeFromWithOptimisticLock{})
		for _, c := range d.Conditions {
			meta.SetStatusCondition(&pr.Status.Conditions, c)
		}
		if err := t.Client.Status().Patch(ctx, pr, patch); err != nil {
			return fmt.Errorf("updating status of %s/%s: %w", pr.Namespace, pr.Name, err)
		}
	}
	for _, c := range d.Conditions {
		if c.Type == provreqv1.Provisioned && c.Status == metav1.ConditionTrue {
			st.snapshot.Booked = append(st.snapshot.Booked, pods...)
		}
	}
	for _, e := range d.Events {
		if err := recordTenantEvent(ctx, t, pr, e, now); err != nil {
			log.Error(err, "recording event", "reason", e.Reason)
		}
	}
	return nil
}

func recordTenantEvent(ctx context.Context, t *tenant.Tenant, pr *provreqv1.ProvisioningRequest, e Event, now time.Time) error {
	ref := corev1.ObjectReference{
		Kind: "ProvisioningRequest", APIVersion: provreqv1.GroupVersion.String(),
		Namespace: pr.Namespace, Name: pr.Name, UID: pr.UID, ResourceVersion: pr.ResourceVersion,
	}
	ev := tenant.NewEvent(ref, e.Type, e.Reason, e.Message, "fke.dev/provisioningrequest", now)
	if _, err := t.Clientset.CoreV1().Events(pr.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating event: %w", err)
	}
	return nil
}

// watch attaches, once per tenant connection, a handler to the tenant's
// ProvisioningRequest informer that enqueues the cluster on every change.
// It fails with a no-match error while the CRD is not installed.
func (r *Reconciler) watch(ctx context.Context, key string, t *tenant.Tenant) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watched == nil {
		r.watched = map[string]*tenant.Tenant{}
	}
	if r.watched[key] == t {
		return nil
	}
	inf, err := t.Cache.GetInformer(ctx, &provreqv1.ProvisioningRequest{})
	if err != nil {
		return err
	}
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		return errors.New("cluster key " + key + " is not namespace/name")
	}
	enqueue := func(any) {
		select {
		case r.Events <- event.GenericEvent{Object: &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}:
		default: // a pass is already queued; it will see the change
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("watching provisioning requests of %s: %w", key, err)
	}
	r.watched[key] = t
	return nil
}

func (r *Reconciler) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.watched, key)
}

var _ reconcile.Reconciler = (*Reconciler)(nil)
