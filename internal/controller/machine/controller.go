// Package machine reconciles Machine objects: it asks the node provider for
// an instance, follows the Node until it is Ready with its GPUs allocatable,
// and on deletion cordons and drains the Node through the eviction API before
// the instance is removed.
package machine

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/index"
	"fke.dev/fke/internal/nodejoin"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/nodetemplate"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/tenant"
	"fke.dev/fke/internal/versions"
)

// AnnotationMachine on a Node names its Machine ("namespace/name", or the
// name alone in the namespace of the node's cluster).
const AnnotationMachine = "fke.dev/machine"

const (
	// NodeSettle delays the reconcile a Node that is not Ready asks for:
	// a new node turns Ready within moments, and the machine's status then
	// changes once instead of twice (one write less per new machine).
	NodeSettle      = time.Second
	requeueNotReady = 2 * time.Second
	requeueReady    = 60 * time.Second
	// DefaultDrainTimeout bounds how long a Node is drained before its pods are deleted.
	DefaultDrainTimeout = 2 * time.Minute
)

// Reconciler reconciles Machines.
type Reconciler struct {
	Client    client.Client
	Tenants   *tenant.Registry
	Providers map[fkev1.ProviderName]nodeprovider.Provider
	Recorder  events.EventRecorder
	// DrainTimeout bounds draining (default DefaultDrainTimeout).
	DrainTimeout time.Duration
	// NodeEvents receives Node changes from tenant clusters (see NodeHandler).
	NodeEvents chan event.GenericEvent
	// after runs f after d (time.AfterFunc when nil).
	after func(d time.Duration, f func())
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.NodeEvents == nil {
		r.NodeEvents = make(chan event.GenericEvent, 4096)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&fkev1.Machine{}).
		Named("machine").
		WithOptions(controller.Options{MaxConcurrentReconciles: 32}).
		WatchesRawSource(source.Channel(r.NodeEvents, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// NodeHandler turns a tenant Node change into a reconcile of its Machine,
// at once for a Ready node and after NodeSettle for one that is not.
func (r *Reconciler) NodeHandler(clusterKey string, node *corev1.Node) {
	ns, name, err := toolscache.SplitMetaNamespaceKey(node.Annotations[AnnotationMachine])
	if err == nil && ns == "" {
		// The kwok provider names the machine alone; it lives in the
		// namespace of the node's cluster.
		ns, _, _ = strings.Cut(clusterKey, "/")
	}
	if err != nil || ns == "" || name == "" {
		return
	}
	m := &fkev1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	send := func() {
		select {
		case r.NodeEvents <- event.GenericEvent{Object: m}:
		default: // full: the periodic requeue catches up
		}
	}
	if nodeutil.NodeReady(node) {
		send()
		return
	}
	after := r.after
	if after == nil {
		after = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	after(NodeSettle, send)
}

// ClusterConnected reconciles every machine of the cluster with key (see
// tenant.ConnectHandler).
func (r *Reconciler) ClusterConnected(clusterKey string) {
	ns, name, err := toolscache.SplitMetaNamespaceKey(clusterKey)
	if err != nil || ns == "" {
		return
	}
	var list fkev1.MachineList
	if err := r.Client.List(context.Background(), &list, index.OfCluster(ns, name)...); err != nil {
		return // the periodic requeue catches up
	}
	for i := range list.Items {
		m := &fkev1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: list.Items[i].Name}}
		select {
		case r.NodeEvents <- event.GenericEvent{Object: m}:
		default:
			return
		}
	}
}

// Reconcile brings one Machine to its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	m := &fkev1.Machine{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cl := &fkev1.Cluster{}
	clusterErr := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ClusterName}, cl)
	if clusterErr != nil && !apierrors.IsNotFound(clusterErr) {
		return ctrl.Result{}, clusterErr
	}
	clusterGone := apierrors.IsNotFound(clusterErr) || !cl.DeletionTimestamp.IsZero()

	if !m.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, m, clusterGone)
	}
	if controllerutil.AddFinalizer(m, fkev1.MachineFinalizer) {
		if err := r.Client.Update(ctx, m); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}
	before := m.DeepCopy()
	defer func() {
		if equality.Semantic.DeepEqual(before.Status, m.Status) {
			return
		}
		if perr := r.Client.Status().Patch(ctx, m, client.MergeFrom(before)); perr != nil && err == nil && !apierrors.IsNotFound(perr) {
			err = fmt.Errorf("patching machine status: %w", perr)
		}
	}()

	if clusterGone {
		setCondition(m, fkev1.ConditionReady, metav1.ConditionFalse, fkev1.ReasonClusterNotReady, "cluster "+m.Spec.ClusterName+" does not exist")
		return ctrl.Result{RequeueAfter: requeueNotReady}, nil
	}
	if !meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionReady) {
		setCondition(m, fkev1.ConditionReady, metav1.ConditionFalse, fkev1.ReasonClusterNotReady, "waiting for cluster "+cl.Name+" to be ready")
		if m.Status.Phase == "" {
			m.Status.Phase = fkev1.MachinePending
		}
		return ctrl.Result{RequeueAfter: requeueNotReady}, nil
	}
	it := &fkev1.InstanceType{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: m.Spec.InstanceType}, it); err != nil {
		return r.fail(m, fkev1.ReasonInvalidSpec, fmt.Sprintf("instance type %s: %v", m.Spec.InstanceType, err)), nil
	}
	provider, ok := r.Providers[m.Spec.Provider]
	if !ok {
		return r.fail(m, fkev1.ReasonInvalidSpec, fmt.Sprintf("provider %q is not available", m.Spec.Provider)), nil
	}
	t, err := r.Tenants.Get(ctx, client.ObjectKeyFromObject(cl).String())
	if err != nil {
		// The tenant API server does not serve (yet): after a manager
		// restart it is being started again. Retry at a steady pace, not
		// with an error's growing backoff, which would leave the machine
		// waiting seconds after the API server is back; ClusterConnected
		// wakes it as soon as the registry connects.
		setCondition(m, fkev1.ConditionReady, metav1.ConditionUnknown, fkev1.ReasonClusterNotReady, "cannot reach the cluster's API server: "+err.Error())
		return ctrl.Result{RequeueAfter: requeueNotReady}, nil
	}
	pc := r.providerCluster(cl, t)

	if m.Status.ProviderID == "" {
		if res, done := r.provision(ctx, m, cl, it, provider, pc); done {
			return res, nil
		}
	} else if inst, err := provider.Get(ctx, pc, m.Status.ProviderID); err == nil && inst.State == nodeprovider.InstanceFailed {
		// A launch that failed after Create returned: say why; the machine
		// stays until it is deleted (the pool replaces unhealthy machines).
		if m.Status.Phase != fkev1.MachineFailed {
			r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, "InstanceFailed", "Observe", "instance %s failed: %s", inst.ProviderID, inst.Message)
		}
		setCondition(m, fkev1.ConditionProvisioned, metav1.ConditionFalse, ReasonInstanceFailed, inst.Message)
		setCondition(m, fkev1.ConditionReady, metav1.ConditionFalse, ReasonInstanceFailed, inst.Message)
		m.Status.Phase = fkev1.MachineFailed
		return ctrl.Result{RequeueAfter: requeueNotReady}, nil
	} else if err != nil {
		// Get also makes sure what the provider runs for the cluster is up
		// (after a manager restart). An instance that vanished is replaced.
		if !nodeprovider.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("getting instance %s: %w", m.Status.ProviderID, err)
		}
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, "InstanceGone", "Observe", "instance %s disappeared; the machine is replaced", m.Status.ProviderID)
		if err := r.Client.Delete(ctx, m); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, nil
	}
	return r.observe(ctx, m, it, t)
}

// pool returns the machine's NodePool: CLUSTER.POOL, or a pool made before
// per-cluster names that the nodepool controller has not renamed yet.
func (r *Reconciler) pool(ctx context.Context, m *fkev1.Machine) (*fkev1.NodePool, error) {
	pool := &fkev1.NodePool{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.NodePoolKey()}, pool)
	if apierrors.IsNotFound(err) {
		legacy := &fkev1.NodePool{}
		if lerr := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.NodePoolName}, legacy); lerr == nil &&
			legacy.Legacy() && legacy.Spec.ClusterName == m.Spec.ClusterName {
			return legacy, nil
		}
	}
	return pool, err
}

// provision asks the provider for the instance; done reports that Reconcile should return res.
func (r *Reconciler) provision(ctx context.Context, m *fkev1.Machine, cl *fkev1.Cluster, it *fkev1.InstanceType, p nodeprovider.Provider, pc nodeprovider.Cluster) (ctrl.Result, bool) {
	pool, err := r.pool(ctx, m)
	if err != nil {
		return r.fail(m, fkev1.ReasonInvalidSpec, fmt.Sprintf("node pool %s of cluster %s: %v", m.Spec.NodePoolName, m.Spec.ClusterName, err)), true
	}
	tmpl := nodetemplate.Build(pool, it, m.Name)
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	tmpl.Annotations[AnnotationMachine] = m.Namespace + "/" + m.Name
	version := versions.OrDefault(m.Spec.Version)
	// A Node may be created with its status: simulated nodes report the
	// machine's kubelet version (real kubelets report their own).
	tmpl.Status.NodeInfo.KubeletVersion = version
	m.Status.Phase = fkev1.MachineProvisioning
	inst, err := p.Create(ctx, pc, nodeprovider.NodeSpec{MachineName: m.Name, InstanceType: it, Template: tmpl, Version: version})
	if err != nil {
		if nodeprovider.IsInsufficientCapacity(err) {
			setCondition(m, fkev1.ConditionProvisioned, metav1.ConditionFalse, fkev1.ReasonInsufficientCapacity, err.Error())
			m.Status.Phase = fkev1.MachineFailed
			r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, fkev1.ReasonInsufficientCapacity, "Provision", "%v", err)
			return ctrl.Result{}, true
		}
		setCondition(m, fkev1.ConditionProvisioned, metav1.ConditionUnknown, fkev1.ReasonInternalError, err.Error())
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, fkev1.ReasonProvisionFailed, "Provision", "%v", err)
		return ctrl.Result{RequeueAfter: requeueNotReady}, true
	}
	m.Status.ProviderID, m.Status.NodeName = inst.ProviderID, inst.NodeName
	setCondition(m, fkev1.ConditionProvisioned, metav1.ConditionTrue, fkev1.ReasonReady, "instance "+inst.ProviderID)
	r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, "Provisioned", "Provision", "created %s as node %s in cluster %s", inst.ProviderID, inst.NodeName, cl.Name)
	return ctrl.Result{}, false
}

// observe sets Registered, GPUReady and Ready from the Node.
func (r *Reconciler) observe(ctx context.Context, m *fkev1.Machine, it *fkev1.InstanceType, t *tenant.Tenant) (ctrl.Result, error) {
	node := &corev1.Node{}
	err := t.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeName}, node)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	want := nodetemplate.GPUCount(it)
	if m.Spec.Provider == fkev1.ProviderLocal {
		// fke's GPU agent advertises each GPU once per time-slicing replica
		// (simulated kwok nodes keep the instance type's count).
		if np, perr := r.pool(ctx, m); perr == nil {
			want *= np.GPUReplicas()
		}
	}
	st := Observe(node, apierrors.IsNotFound(err), want)
	m.Status.GPUAllocatable = st.GPUAllocatable
	setCondition(m, fkev1.ConditionRegistered, st.Registered.Status, st.Registered.Reason, st.Registered.Message)
	setCondition(m, fkev1.ConditionGPUReady, st.GPUReady.Status, st.GPUReady.Reason, st.GPUReady.Message)
	if st.Ready() {
		if m.Status.Phase != fkev1.MachineRunning {
			r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, "Ready", "Observe", "node %s is ready with %d GPUs allocatable", m.Status.NodeName, st.GPUAllocatable)
		}
		m.Status.Phase = fkev1.MachineRunning
		if m.Status.FirstReadyTime == nil {
			now := metav1.Now()
			m.Status.FirstReadyTime = &now
		}
		setCondition(m, fkev1.ConditionReady, metav1.ConditionTrue, fkev1.ReasonReady, "node is ready")
		return ctrl.Result{RequeueAfter: requeueReady}, nil
	}
	m.Status.Phase = fkev1.MachineProvisioning
	msg := st.Registered.Message
	if st.Registered.Status == metav1.ConditionTrue {
		msg = st.GPUReady.Message
	}
	setCondition(m, fkev1.ConditionReady, metav1.ConditionFalse, fkev1.ReasonProvisioning, msg)
	return ctrl.Result{RequeueAfter: requeueNotReady}, nil
}

func (r *Reconciler) fail(m *fkev1.Machine, reason, msg string) ctrl.Result {
	m.Status.Phase = fkev1.MachineFailed
	setCondition(m, fkev1.ConditionReady, metav1.ConditionFalse, reason, msg)
	r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, reason, "Provision", "%s", msg)
	return ctrl.Result{RequeueAfter: 30 * time.Second}
}

// ReasonInstanceFailed: the provider reports the machine's instance failed.
const ReasonInstanceFailed = "InstanceFailed"

// ProviderCluster describes a tenant cluster to a node provider, without a
// way for real nodes to join (see Reconciler.providerCluster).
func ProviderCluster(cl *fkev1.Cluster, t *tenant.Tenant) nodeprovider.Cluster {
	return nodeprovider.Cluster{
		Key: client.ObjectKeyFromObject(cl).String(), Name: cl.Name, Config: t.Config,
		PodCIDR: cl.Spec.Network.PodCIDR, ServiceCIDR: cl.Spec.Network.ServiceCIDR, Version: cl.Status.Version,
		Hosted: cl.Spec.Runtime == fkev1.RuntimeHosted,
	}
}

// providerCluster is ProviderCluster with the join of real nodes: the API
// server at the host bridge's gateway, the cluster CA, and bootstrap tokens
// of the pools for kubelets (TLS bootstrap), whose nodes then ask for their
// kube-proxy's certificate themselves. Without a client of the tenant,
// certificates signed by the CA from the cluster's PKI Secret.
func (r *Reconciler) providerCluster(cl *fkev1.Cluster, t *tenant.Tenant) nodeprovider.Cluster {
	pc := ProviderCluster(cl, t)
	pc.LoopbackKubeletCert = func(ctx context.Context) ([]byte, []byte, error) {
		s := &corev1.Secret{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: fkev1.PKISecretName(cl.Name)}, s); err != nil {
			return nil, nil, err
		}
		b := pki.Bundle(s.Data)
		cert, key := b[pki.CertFile(pki.LoopbackKubelet)], b[pki.KeyFile(pki.LoopbackKubelet)]
		if len(cert) == 0 || len(key) == 0 {
			return nil, nil, fmt.Errorf("secret %s has no %s certificate yet", s.Name, pki.LoopbackKubelet)
		}
		return cert, key, nil
	}
	if t.Config == nil || len(t.Config.CAData) == 0 {
		return pc
	}
	server, err := nodejoin.NodeServer(t.Config.Host)
	if err != nil {
		return pc
	}
	var creds nodeprovider.Credentials = &nodejoin.CertCredentials{
		ClusterName: cl.Name, Server: server, TLSServerName: nodejoin.ServerName,
		CA: func(ctx context.Context) (*pki.KeyPair, error) {
			s := &corev1.Secret{}
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: fkev1.PKISecretName(cl.Name)}, s); err != nil {
				return nil, err
			}
			return pki.Bundle(s.Data).KeyPair(pki.CA)
		},
	}
	if t.Clientset != nil {
		creds = &nodejoin.TokenCredentials{Client: t.Clientset, Server: server, CAPEM: t.Config.CAData}
	}
	if join, err := nodejoin.Join(t.Config.Host, t.Config.CAData, cl.Spec.Network.ServiceCIDR, creds); err == nil {
		pc.Join = join
	}
	return pc
}

func setCondition(m *fkev1.Machine, t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: m.Generation})
}

func isNotFound(err error) bool { return nodeprovider.IsNotFound(err) }
