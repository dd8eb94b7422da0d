// Package nodepool reconciles NodePool objects: it keeps one Machine per
// desired node, removes the cheapest nodes first when scaling down, and
// replaces nodes made from an old template as a rolling update.
package nodepool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"golang.org/x/sync/errgroup"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/internal/phases"
	"fke.dev/fke/internal/tenant"
	"fke.dev/fke/internal/versions"
)

// GPUAgents installs fke's GPU agent (device plugin, labels, health,
// metrics) for the pools whose nodes run a real kubelet; simulated nodes
// advertise their GPUs themselves.
type GPUAgents interface {
	// Ensure installs or updates the agent of np (of GPU instance type it)
	// in tenant t. Idempotent and cheap when nothing changed.
	Ensure(ctx context.Context, t *tenant.Tenant, np *fkev1.NodePool, it *fkev1.InstanceType) error
	// Remove deletes np's agent. Idempotent.
	Remove(ctx context.Context, t *tenant.Tenant, np *fkev1.NodePool) error
}

// Reconciler reconciles NodePools.
type Reconciler struct {
	Client   client.Client
	Tenants  *tenant.Registry
	Recorder events.EventRecorder
	// NodeEvents receives tenant Node changes (see NodeHandler).
	NodeEvents chan event.GenericEvent
	// GPUAgents installs the GPU agent of pools of real GPU nodes; nil
	// when this fke makes no real nodes.
	GPUAgents GPUAgents

	mu sync.Mutex
	// usage keeps each pool's node usage from its last reconcile.
	usage map[string]map[string]usageEntry
}

// keptUsage returns the node usage kept from pool's last reconcile. A pool
// is never reconciled twice at once, but pools are.
func (r *Reconciler) keptUsage(pool string) map[string]usageEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.usage[pool]
}

// keepUsage keeps pool's node usage for its next reconcile; nil forgets it.
func (r *Reconciler) keepUsage(pool string, u map[string]usageEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u == nil {
		delete(r.usage, pool)
		return
	}
	if r.usage == nil {
		r.usage = map[string]map[string]usageEntry{}
	}
	r.usage[pool] = u
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.NodeEvents == nil {
		r.NodeEvents = make(chan event.GenericEvent, 4096)
	}
	return ctrl.NewControllerManagedBy(mgr).
		// A pool's own status patches do not wake it up again.
		For(&fkev1.NodePool{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, deletionStarted))).
		Named("nodepool").
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Watches(&fkev1.Machine{}, enqueueAfter(StatusDelay, func(o client.Object) (client.ObjectKey, bool) {
			m, ok := o.(*fkev1.Machine)
			if !ok {
				return client.ObjectKey{}, false
			}
			return client.ObjectKey{Namespace: m.Namespace, Name: m.NodePoolKey()}, true
		})).
		WatchesRawSource(source.Channel(r.NodeEvents, enqueueAfter(StatusDelay, func(o client.Object) (client.ObjectKey, bool) {
			return client.ObjectKeyFromObject(o), true
		}))).
		Complete(r)
}

// deletionStarted passes the update that sets an object's deletion timestamp.
var deletionStarted = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return e.ObjectOld.GetDeletionTimestamp() == nil && e.ObjectNew.GetDeletionTimestamp() != nil
}}

// StatusDelay is how long a change of a pool's machines, nodes or GPU pods
// waits before the pool is reconciled. Changes in that time are reconciled
// together: a pool of a thousand nodes whose heartbeats and pods change
// all the time is reconciled a few times a second, not continuously. Spec
// changes are reconciled at once.
const StatusDelay = 500 * time.Millisecond

// enqueueAfter enqueues the pool that key maps an object to, after delay;
// a pool already waiting keeps its earlier time.
func enqueueAfter(delay time.Duration, key func(client.Object) (client.ObjectKey, bool)) handler.EventHandler {
	add := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if k, ok := key(o); ok {
			q.AddAfter(reconcile.Request{NamespacedName: k}, delay)
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
	}
}

// NodeHandler turns a tenant Node change into a reconcile of its pool.
func (r *Reconciler) NodeHandler(clusterKey string, node *corev1.Node) {
	pool := node.Labels[fkev1.LabelNodePool]
	ns, clusterName, err := toolscache.SplitMetaNamespaceKey(clusterKey)
	if pool == "" || err != nil || ns == "" {
		return
	}
	name := fkev1.NodePoolObjectName(clusterName, pool)
	select {
	case r.NodeEvents <- event.GenericEvent{Object: &fkev1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}:
	default:
	}
}

// PodHandler turns a change of a pod bound to a pool's node into a
// reconcile of that pool (GPU allocation in its status).
func (r *Reconciler) PodHandler(clusterKey string, pod *corev1.Pod) {
	// Only GPU pods change what the pool reports (GPUs allocated); the
	// thousands of other pods of a large cluster do not wake the pool up.
	if pod.Spec.NodeName == "" || !nodeutil.RequestsGPU(pod) {
		return
	}
	t, err := r.Tenants.Get(context.Background(), clusterKey)
	if err != nil {
		return
	}
	node := &corev1.Node{}
	if err := t.Client.Get(context.Background(), client.ObjectKey{Name: pod.Spec.NodeName}, node); err != nil {
		return
	}
	r.NodeHandler(clusterKey, node)
}

// Reconcile brings one NodePool to its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	np := &fkev1.NodePool{}
	if err := r.Client.Get(ctx, req.NamespacedName, np); err != nil {
		if apierrors.IsNotFound(err) {
			r.keepUsage(req.String(), nil)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	machines, err := r.machines(ctx, np)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !np.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, np, machines)
	}
	if np.Legacy() {
		return ctrl.Result{}, r.rename(ctx, np, machines)
	}
	if controllerutil.AddFinalizer(np, fkev1.NodePoolFinalizer) {
		if err := r.Client.Update(ctx, np); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}
	before := np.DeepCopy()
	defer func() {
		np.Status.ObservedGeneration = np.Generation
		if equality.Semantic.DeepEqual(before.Status, np.Status) {
			return
		}
		if perr := r.Client.Status().Patch(ctx, np, client.MergeFrom(before)); perr != nil && err == nil && !apierrors.IsNotFound(perr) {
			err = fmt.Errorf("patching node pool status: %w", perr)
		}
	}()

	p := &pass{key: req.String(), np: np, machines: machines, desired: np.DesiredReplicas()}
	np.Status.DesiredReplicas = int32(p.desired)
	np.Status.Selector = labels.SelectorFromSet(np.MachineSelector()).String()
	if res, _, ended, err := phases.Run(ctx, p, r.phases()); ended {
		return res, err
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) apply(ctx context.Context, np *fkev1.NodePool, hash, version string, plan Plan, live, desired int) error {
	// Creations and deletions go out in parallel: a pool of a thousand nodes
	// is created in seconds, not one round trip at a time.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := 0; i < plan.Create; i++ {
		g.Go(func() error {
			m := &fkev1.Machine{
				ObjectMeta: metav1.ObjectMeta{
					Namespace:       np.Namespace,
					GenerateName:    np.Spec.ClusterName + "-" + np.PoolName() + "-",
					Labels:          np.MachineSelector(),
					OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(np, fkev1.GroupVersion.WithKind("NodePool"))},
					// Born with the machine controller's finalizer: one write
					// (and one watch event) less per machine.
					Finalizers: []string{fkev1.MachineFinalizer},
				},
				Spec: fkev1.MachineSpec{
					ClusterName: np.Spec.ClusterName, NodePoolName: np.PoolName(), InstanceType: np.Spec.InstanceType,
					Provider: np.Spec.Provider, TemplateHash: hash, Version: version,
				},
			}
			if err := r.Client.Create(gctx, m); err != nil {
				return fmt.Errorf("creating machine: %w", err)
			}
			return nil
		})
	}
	for _, name := range plan.Delete {
		g.Go(func() error {
			m := &fkev1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: np.Namespace, Name: name}}
			if err := r.Client.Delete(gctx, m); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting machine %s: %w", name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	switch {
	case plan.Rolling && (plan.Create > 0 || len(plan.Delete) > 0):
		r.Recorder.Eventf(np, nil, corev1.EventTypeNormal, "RollingUpdate", "Replace", "replacing nodes: %d created, %d removed (%v)", plan.Create, len(plan.Delete), plan.Delete)
	case plan.Create > 0:
		r.Recorder.Eventf(np, nil, corev1.EventTypeNormal, "ScaledUp", "Scale", "creating %d machines (%d → %d)", plan.Create, live, desired)
	case len(plan.Delete) > 0:
		r.Recorder.Eventf(np, nil, corev1.EventTypeNormal, "ScaledDown", "Scale", "removing machines %v (%d → %d)", plan.Delete, live, desired)
	}
	return nil
}

// finalize deletes the pool's machines and removes the finalizer once they are gone.
func (r *Reconciler) finalize(ctx context.Context, np *fkev1.NodePool, machines []*fkev1.Machine) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(np, fkev1.NodePoolFinalizer) {
		return ctrl.Result{}, nil
	}
	for _, m := range machines {
		if m.DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, m); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("deleting machine %s: %w", m.Name, err)
			}
		}
	}
	if len(machines) > 0 {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if r.GPUAgents != nil && np.Spec.Provider == fkev1.ProviderLocal {
		// Best effort: a deleted cluster takes the agent with it.
		if t, ok := r.Tenants.Connected(np.Namespace + "/" + np.Spec.ClusterName); ok {
			if err := r.GPUAgents.Remove(ctx, t, np); err != nil {
				ctrllog.FromContext(ctx).Info("removing the GPU agent", "pool", np.Name, "error", err.Error())
			}
		}
	}
	controllerutil.RemoveFinalizer(np, fkev1.NodePoolFinalizer)
	if err := r.Client.Update(ctx, np); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) machines(ctx context.Context, np *fkev1.NodePool) ([]*fkev1.Machine, error) {
	// The cache's objects, not copies (a pool has up to thousands of
	// machines and is reconciled on each of their changes): only read, and
	// deleted by name.
	var list fkev1.MachineList
	if err := r.Client.List(ctx, &list, client.InNamespace(np.Namespace), client.MatchingLabels(np.MachineSelector()), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing machines: %w", err)
	}
	out := make([]*fkev1.Machine, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.ClusterName == np.Spec.ClusterName {
			out = append(out, &list.Items[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// PoolVersion is the Kubernetes version of the kubelets of a pool's new
// nodes: the pool's pinned version, else its cluster's. A pool that
// follows its cluster moves only once the whole control plane has been
// upgraded (kubelets must never be newer than the API server, and the
// controller manager and scheduler are upgraded after it).
func PoolVersion(np *fkev1.NodePool, cl *fkev1.Cluster) string {
	if np.Spec.Version != "" {
		return np.Spec.Version
	}
	if up := cl.Status.Upgrade; up != nil && up.CompletionTime == nil && up.From != "" {
		return up.From
	}
	for _, c := range cl.Status.ControlPlane {
		if c.Name == controlplane.APIServer && c.Version != "" {
			return c.Version
		}
	}
	return versions.OrDefault(cl.Spec.Version)
}

// TemplateHash identifies what a pool's nodes are made from; machines with
// another hash are replaced by a rolling update.
func TemplateHash(np *fkev1.NodePool) string {
	data, _ := json.Marshal(struct {
		InstanceType    string
		Labels          map[string]string
		Taints          []corev1.Taint
		DisableGPUTaint bool
	}{np.Spec.InstanceType, np.Spec.Labels, np.Spec.Taints, np.Spec.DisableGPUTaint})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:10]
}

func setCondition(np *fkev1.NodePool, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&np.Status.Conditions, metav1.Condition{
		Type: fkev1.ConditionReady, Status: s, Reason: reason, Message: msg, ObservedGeneration: np.Generation,
	})
}
