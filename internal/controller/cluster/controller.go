// Package cluster reconciles Cluster objects: it keeps each tenant control
// plane's PKI and kubeconfig in Secrets and runs the control plane through a
// controlplane.Runtime.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/bootstrap"
	"fke.dev/fke/internal/clusterbackup"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/phases"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/tenant"
)

// Requeue intervals: fast while a control plane comes up, slow once it is ready
// (to notice crashes and restarts).
const (
	requeueStarting = 200 * time.Millisecond
	// requeueQueued: a control plane queued behind others that start
	// (a hosted one) asks again this often.
	requeueQueued = 2 * time.Second
	requeueReady  = 10 * time.Second
	// requeueAddons: while an addon starts or is being removed.
	requeueAddons = time.Second
)

// Reconciler reconciles Cluster objects.
type Reconciler struct {
	Client client.Client
	// APIReader reads from the API server, not the cache: an upgrade step
	// reads the upgrade's status there, so that a step a stale cache does
	// not show yet is not taken twice. Nil reads through Client.
	APIReader client.Reader
	// Runtimes run control planes, by the spec.runtime they serve; a
	// Cluster whose runtime is not here waits, saying so.
	Runtimes map[fkev1.ControlPlaneRuntime]controlplane.Runtime
	Recorder events.EventRecorder
	// Versioner reads the version a ready API server reports; nil skips it.
	Versioner func(ctx context.Context, endpoint string, kubeconfig []byte) (string, error)
	// Addons installs what fke needs in a ready tenant cluster (e.g. the
	// ProvisioningRequest API); nil skips it. It must be idempotent and cheap
	// when everything is in place.
	Addons func(ctx context.Context, cfg *rest.Config) error
	// Managed are the addons clusters turn on and off in spec.addons (see
	// addons.Managed); none when empty.
	Managed []addons.Managed
	// Tenants is disconnected from a deleted cluster; nil skips it.
	Tenants *tenant.Registry
	// Providers release what they run for a deleted cluster (kwok processes).
	Providers map[fkev1.ProviderName]nodeprovider.Provider
	// NodeAddress, when set, is the address nodes reach every tenant API
	// server at (see controlplane.Spec.NodeAddress); serving certificates of
	// existing clusters are re-issued to cover it.
	NodeAddress string
	// Approvers runs the kubelet serving-certificate approver of every ready
	// tenant; nil skips it.
	Approvers *bootstrap.Approvers

	// BackupDir holds the etcd snapshots (<BackupDir>/<namespace>/<cluster>/)
	// clusters are restored from.
	BackupDir string

	// HostRoutes lists the host's routes pod ranges must avoid; nil reads
	// this host's routing table.
	HostRoutes func() ([]netip.Prefix, error)

	// Warm configures the pool of standby control planes (off when
	// Warm.Namespace is empty); RunPool keeps it.
	Warm WarmPool

	portsMu sync.Mutex // serialises port allocation across clusters
	// recentPorts are the ports handed out lately (portsMu held).
	recentPorts map[int32]time.Time
	// poolMu serialises claims of standby planes with the pool's steps.
	poolMu   sync.Mutex
	poolKick chan struct{}
	// poolSince is when this process's RunPool began (in the pool's status).
	poolSince time.Time
	claims    sync.Map   // cluster UID -> id of the plane it claimed, until the claim is finished
	cidrMu    sync.Mutex // serialises pod-range picks across clusters
	picked    map[string]netip.Prefix
	base      sync.Map // cluster key -> true once the base addons are installed
	adopted   sync.Map // cluster key -> true once the takeover of its processes was reported
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.poolKick = make(chan struct{}, 1)
	if r.Warm.Namespace != "" {
		if err := mgr.Add(manager.RunnableFunc(r.RunPool)); err != nil {
			return err
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&fkev1.Cluster{}).
		Named("cluster").
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

// Reconcile brings one Cluster's control plane to its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	log := logr.FromContextOrDiscard(ctx)
	cl := &fkev1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cl); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without our finalizer (or already cleaned up): make sure nothing runs.
			return ctrl.Result{}, r.stopEverywhere(ctx, req.String())
		}
		return ctrl.Result{}, fmt.Errorf("getting cluster: %w", err)
	}

	if !cl.DeletionTimestamp.IsZero() {
		waiting, err := r.finalize(ctx, cl)
		if waiting {
			return ctrl.Result{RequeueAfter: 500 * time.Millisecond}, err
		}
		return ctrl.Result{}, err
	}
	if controllerutil.AddFinalizer(cl, fkev1.ClusterFinalizer) {
		if err := r.Client.Update(ctx, cl); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}

	p := &pass{key: req.String(), cl: cl, before: cl.DeepCopy(), requeue: requeueReady}
	defer func() {
		perr := r.patchStatus(ctx, p.before, cl)
		switch {
		case apierrors.IsConflict(perr) && err == nil:
			// Read from a cache behind the API server: this reconcile's
			// status would undo a newer one. The next reconcile, on the
			// newer object, does its work again (every step is idempotent).
			log.V(1).Info("status written meanwhile; reconciling again", "cluster", req.String())
			res = ctrl.Result{RequeueAfter: conflictRetry}
		case apierrors.IsConflict(perr):
			// err already brings the reconcile back.
		case perr != nil && err == nil:
			err = perr
		}
	}()
	// flush records the status now, before a long step (an upgrade); it
	// fails when the status read is no longer the newest.
	p.flush = func() error {
		if perr := r.patchStatus(ctx, p.before, cl); perr != nil {
			log.Info("recording status", "cluster", req.String(), "error", perr.Error())
			return perr
		}
		p.before = cl.DeepCopy()
		return nil
	}
	if res, _, ended, err := phases.Run(ctx, p, r.phases()); ended {
		return res, err
	}
	return ctrl.Result{RequeueAfter: p.requeue}, nil
}

// reportAdopted records an event, once per cluster and process, when the
// ready control plane of key runs on processes an earlier fke-manager
// started (kept by the process holder through its restart): they were
// taken over, not restarted.
func (r *Reconciler) reportAdopted(cl *fkev1.Cluster, key string, st controlplane.Status) {
	pids := adoptedPIDs(st)
	if len(pids) == 0 {
		return
	}
	if _, told := r.adopted.LoadOrStore(key, true); told {
		return
	}
	r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "ControlPlaneAdopted", "Monitor",
		"the control plane ran on through a restart of fke-manager: its processes (pids %v) were taken over, not restarted", pids)
}

// adoptedPIDs lists, once each and in order, the pids of the components
// of st taken over from an earlier fke-manager.
func adoptedPIDs(st controlplane.Status) []int {
	var pids []int
	for _, c := range st.Components {
		if c.Adopted && c.PID != 0 && !slices.Contains(pids, c.PID) {
			pids = append(pids, c.PID)
		}
	}
	return pids
}

// runtime returns the runtime of cl's spec.runtime (nil when this
// manager does not run it; validate says so before anything is asked of it).
// startPoll is how often a starting control plane of rt is asked again.
func startPoll(rt controlplane.Runtime) time.Duration {
	if p, ok := rt.(controlplane.StartPoller); ok {
		return p.StartPollInterval()
	}
	return requeueStarting
}

func (r *Reconciler) runtime(cl *fkev1.Cluster) controlplane.Runtime {
	return clusterbackup.RuntimeOf(r.Runtimes, cl)
}

// backupDir is where the snapshots of cluster namespace/name are kept.
func (r *Reconciler) backupDir(namespace, name string) backup.Dir {
	return backup.Dir(filepath.Join(r.BackupDir, namespace, name))
}

// keepSnapshot takes a snapshot of cl's data into its backup directory
// before a step that changes the data (an upgrade, a restore in place),
// keeps the keys that restore it, and lists it in status.backups.
func (r *Reconciler) keepSnapshot(ctx context.Context, cl *fkev1.Cluster, bundle pki.Bundle, now time.Time) (backup.Snapshot, error) {
	dir := r.backupDir(cl.Namespace, cl.Name)
	snap, err := clusterbackup.TakeSnapshot(ctx, r.runtime(cl), cl, bundle, dir, now)
	if errors.Is(err, backup.ErrExists) {
		// A snapshot was taken in this second (perhaps the one a restore
		// in place reads): this one is named after the next.
		select {
		case <-ctx.Done():
			return backup.Snapshot{}, ctx.Err()
		case <-time.After(time.Until(backup.NextName(now))):
		}
		snap, err = clusterbackup.TakeSnapshot(ctx, r.runtime(cl), cl, bundle, dir, time.Now())
	}
	if err == nil {
		err = clusterbackup.EnsureRestoreKeys(ctx, r.Client, cl, bundle)
	}
	if err != nil {
		return backup.Snapshot{}, err
	}
	if kept, lerr := backup.List(dir); lerr == nil {
		cl.Status.Backups = clusterbackup.BackupRecords(cl.Status.Backups, kept, nil, false)
	}
	return snap, nil
}

// local returns the local runtime, which keeps the warm pool (nil when
// this manager does not run it).
func (r *Reconciler) local() controlplane.Runtime { return r.Runtimes[fkev1.RuntimeLocal] }

// stopEverywhere stops the control plane of key in every runtime: its
// Cluster is gone, so which one ran it is not known. Idempotent.
func (r *Reconciler) stopEverywhere(ctx context.Context, key string) error {
	var errs []error
	for name, rt := range r.Runtimes {
		if err := rt.Stop(ctx, key); err != nil {
			errs = append(errs, fmt.Errorf("runtime %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// baseInstalled reports whether the addons every cluster gets were
// installed into the running control plane of key.
func (r *Reconciler) baseInstalled(key string) bool {
	_, ok := r.base.Load(key)
	return ok
}

// inPlaceRequest returns the restore in place that cl asks for and that
// was not done yet ("" when none). A request the cache shows as not done
// is checked on the API server: the status write of the reconcile that
// did it may not be in the cache yet, and a restore done twice would set
// aside (or snapshot over) the data the first one restored.
func (r *Reconciler) inPlaceRequest(ctx context.Context, cl *fkev1.Cluster) (string, error) {
	want := cl.Annotations[fkev1.AnnotationRestoreInPlace]
	if want == "" || want == cl.Status.RestoreRequest {
		return "", nil
	}
	if r.APIReader == nil {
		return want, nil
	}
	fresh := &fkev1.Cluster{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cl), fresh); err != nil {
		return "", fmt.Errorf("reading cluster %s before restoring it in place: %w", cl.Name, err)
	}
	if fresh.Status.RestoreRequest == want {
		return "", nil
	}
	return want, nil
}

// restoreInPlace checks the snapshot a restore in place asks for (want is
// "SNAPSHOT@NONCE", a snapshot of cl itself), then stops cl's control plane
// and sets its etcd data aside; it returns the snapshot file the next
// Ensure restores. On a runtime that is an InPlaceRestorer it takes a
// snapshot of the data first (kept names it) and has the runtime replace
// the data itself: the next Ensure only starts the components again.
func (r *Reconciler) restoreInPlace(ctx context.Context, cl *fkev1.Cluster, bundle pki.Bundle, want string) (path, kept string, err error) {
	name, _, _ := strings.Cut(want, "@")
	_, path, err = r.restoreSnapshot(ctx, cl, &fkev1.ClusterRestore{Cluster: cl.Name, Snapshot: name})
	if err != nil {
		return "", "", fmt.Errorf("cannot restore %s in place from %s: %w", cl.Name, name, err)
	}
	rt := r.runtime(cl)
	ip, ok := rt.(controlplane.InPlaceRestorer)
	if !ok {
		if err := rt.SetAsideData(ctx, client.ObjectKeyFromObject(cl).String()); err != nil {
			return "", "", fmt.Errorf("restoring %s in place: %w", cl.Name, err)
		}
		return path, "", nil
	}
	// The runtime replaces the data rather than setting it aside: a
	// snapshot keeps it first.
	snap, err := r.keepSnapshot(ctx, cl, bundle, time.Now())
	if err != nil {
		return "", "", fmt.Errorf("restoring %s in place: keeping its data first: %w", cl.Name, err)
	}
	r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "SnapshotTaken", "Restore", "snapshot %s keeps the data the restore replaces (%d bytes, revision %d)", snap.Name, snap.Size, snap.Revision)
	spec := controlplane.Spec{Key: client.ObjectKeyFromObject(cl).String(), PKI: bundle, Datastore: string(cl.Spec.Datastore)}
	if err := ip.RestoreInPlace(ctx, spec, path); err != nil {
		return "", "", fmt.Errorf("restoring %s in place: %w", cl.Name, err)
	}
	return path, snap.Name, nil
}

// finalize removes the cluster's node pools, stops the control plane, removes
// its data and Secrets, then the finalizer. waiting reports that node pools
// or machines are still going away.
func (r *Reconciler) finalize(ctx context.Context, cl *fkev1.Cluster) (waiting bool, err error) {
	if !controllerutil.ContainsFinalizer(cl, fkev1.ClusterFinalizer) {
		return false, nil
	}
	key := client.ObjectKeyFromObject(cl).String()
	if cl.Status.Phase != "Deleting" {
		cl.Status.Phase = "Deleting"
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{
			Type: fkev1.ConditionReady, Status: metav1.ConditionFalse, Reason: fkev1.ReasonDeleting,
			Message: "control plane is being deleted", ObservedGeneration: cl.Generation,
		})
		if err := r.Client.Status().Update(ctx, cl); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("marking cluster deleting: %w", err)
		}
	}
	if done, err := r.removeWorkers(ctx, cl); err != nil || !done {
		return !done, err
	}
	if r.Approvers != nil {
		r.Approvers.Stop(key)
	}
	r.base.Delete(key)
	r.adopted.Delete(key)
	r.cidrMu.Lock()
	delete(r.picked, key)
	r.cidrMu.Unlock()
	if err := r.runtime(cl).Delete(ctx, key); err != nil {
		r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, "DeleteFailed", "Delete", "deleting control plane: %v", err)
		return false, fmt.Errorf("deleting control plane %s: %w", key, err)
	}
	for _, name := range []string{fkev1.PKISecretName(cl.Name), fkev1.KubeconfigSecretName(cl.Name)} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cl.Namespace, Name: name}}
		if err := r.Client.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("deleting secret %s: %w", name, err)
		}
	}
	controllerutil.RemoveFinalizer(cl, fkev1.ClusterFinalizer)
	if err := r.Client.Update(ctx, cl); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("removing finalizer: %w", err)
	}
	return false, nil
}

// startApprover starts the tenant's kubelet serving-certificate approver.
func (r *Reconciler) startApprover(key string, kubeconfig []byte) error {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig of %s: %w", key, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client for %s: %w", key, err)
	}
	r.Approvers.Ensure(key, cs)
	return nil
}

// conflictRetry is how soon a reconcile whose status write met a newer
// object runs again.
const conflictRetry = 50 * time.Millisecond

// patchStatus writes after's status as a patch from before, only if the
// cluster is still at before's resourceVersion: the patch replaces whole
// lists (conditions, backups), so one computed from a stale read would
// undo a newer write. A conflict is returned as such.
func (r *Reconciler) patchStatus(ctx context.Context, before, after *fkev1.Cluster) error {
	after.Status.ObservedGeneration = after.Generation
	if equalStatus(before.Status, after.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, after, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching cluster status: %w", err)
	}
	return nil
}
