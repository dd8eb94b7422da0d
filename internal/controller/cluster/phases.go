package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/clusterbackup"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/phases"
	"fke.dev/fke/internal/pki"
)

// pass is one reconcile of a live Cluster: what its phases read and what
// each leaves for the next.
type pass struct {
	key string
	cl  *fkev1.Cluster
	// before is the status the final patch is computed from; flush writes
	// the status now and moves before on.
	before *fkev1.Cluster
	flush  func() error

	bundle pki.Bundle
	// restore is the snapshot the control plane starts from, if any.
	restore    string
	spec       controlplane.Spec
	st         controlplane.Status
	wasReady   bool
	kubeconfig []byte
	tenantCfg  *rest.Config
	// requeue is when the pass wants to run again once every phase ran.
	requeue time.Duration
}

// phases are the steps of a pass over a live Cluster, in order.
func (r *Reconciler) phases() []phases.Phase[*pass] {
	return []phases.Phase[*pass]{
		{Name: "validate", Run: r.validatePhase},
		{Name: "allocate", Run: r.allocatePhase},
		{Name: "pki", Run: r.pkiPhase},
		{Name: "restore", Run: r.restorePhase},
		{Name: "control plane", Run: r.controlPlanePhase},
		{Name: "upgrade", Run: r.upgradePhase},
		{Name: "addons", Run: r.addonsPhase},
		{Name: "approver", Run: r.approverPhase},
		{Name: "version", Run: r.versionPhase},
	}
}

// next goes on to the next phase.
var next = ctrl.Result{}

// stop ends the pass with an error the status says as Unknown.
func stop(cl *fkev1.Cluster, err error) (ctrl.Result, bool, error) {
	setUnknown(cl, err)
	return ctrl.Result{}, true, err
}

// validatePhase stops at a spec the controller cannot run, saying why.
func (r *Reconciler) validatePhase(_ context.Context, p *pass) (ctrl.Result, bool, error) {
	if reason, msg, ok := r.validate(p.cl); !ok {
		setNotReady(p.cl, reason, msg)
		r.Recorder.Eventf(p.cl, nil, corev1.EventTypeWarning, reason, "Validate", msg)
		return ctrl.Result{}, true, nil
	}
	return next, false, nil
}

// allocatePhase claims a warm-pool plane, the pod CIDR and the ports;
// each is written at once.
func (r *Reconciler) allocatePhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	for _, step := range []func(context.Context, *fkev1.Cluster) error{r.claimStandby, r.ensurePodCIDR, r.ensurePorts} {
		if err := step(ctx, p.cl); err != nil {
			return stop(p.cl, err)
		}
	}
	// The steps above write what they choose at once; cl is what they
	// wrote (nothing else of its status changed yet), so the status
	// written at the end is a patch from there.
	p.before = p.cl.DeepCopy()
	return next, false, nil
}

func (r *Reconciler) pkiPhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	bundle, err := r.ensurePKI(ctx, p.cl)
	if err != nil {
		return stop(p.cl, err)
	}
	p.bundle = bundle
	return next, false, nil
}

// restorePhase finds the snapshot a new cluster starts from, and restores
// in place when asked.
func (r *Reconciler) restorePhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	cl := p.cl
	// Once the control plane was started, its etcd holds the snapshot's
	// data: the snapshot may since have been pruned.
	if from := cl.Spec.RestoreFrom; from != nil && cl.Status.Endpoint == "" {
		_, path, err := r.restoreSnapshot(ctx, cl, from)
		if err != nil {
			msg := fmt.Sprintf("cannot restore from snapshot %s of cluster %s: %v", from.Snapshot, from.Cluster, err)
			setNotReady(cl, fkev1.ReasonRestoreFailed, msg)
			r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, fkev1.ReasonRestoreFailed, "Restore", msg)
			return ctrl.Result{RequeueAfter: time.Minute}, true, nil
		}
		p.restore = path
	}
	want, err := r.inPlaceRequest(ctx, cl)
	if err != nil {
		return stop(cl, err)
	}
	if want == "" {
		return next, false, nil
	}
	path, kept, err := r.restoreInPlace(ctx, cl, p.bundle, want)
	cl.Status.RestoreRequest = want
	if err != nil {
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: fkev1.ConditionRestored, Status: metav1.ConditionFalse,
			Reason: fkev1.ReasonRestoreFailed, Message: err.Error(), ObservedGeneration: cl.Generation})
		r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, fkev1.ReasonRestoreFailed, "Restore", "%v", err)
		return next, false, nil
	}
	msg := fmt.Sprintf("restored in place from snapshot %s; the data it replaced is kept beside the cluster's etcd data", filepath.Base(path))
	if kept != "" {
		msg = fmt.Sprintf("restored in place from snapshot %s; the data it replaced is kept as snapshot %s", filepath.Base(path), kept)
	} else {
		p.restore = path
	}
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: fkev1.ConditionRestored, Status: metav1.ConditionTrue,
		Reason: "RestoredInPlace", Message: msg, ObservedGeneration: cl.Generation})
	r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "RestoredInPlace", "Restore", "%s", msg)
	return next, false, nil
}

// controlPlanePhase starts (or keeps) the control plane through the
// cluster's runtime, writes its kubeconfig and reports its status; the
// pass goes on once it is ready.
func (r *Reconciler) controlPlanePhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	cl := p.cl
	p.spec = controlplane.Spec{
		Restore:   p.restore,
		Key:       p.key,
		Version:   cl.Spec.Version,
		Datastore: string(cl.Spec.Datastore),
		// Components start again at the version they ran, also in the
		// middle of an upgrade; reconcileUpgrade moves them on.
		ComponentVersions: startVersions(cl),
		Ports:             clusterbackup.PortsOf(cl.Status.Ports),
		PodCIDR:           cl.Spec.Network.PodCIDR,
		ServiceCIDR:       cl.Spec.Network.ServiceCIDR,
		PKI:               p.bundle,
		NodeAddress:       r.NodeAddress,
	}
	p.wasReady = meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionControlPlaneReady)
	st, err := r.runtime(cl).Ensure(ctx, p.spec)
	if err != nil {
		setUnknown(cl, err)
		r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, "ControlPlaneFailed", "Start", "starting control plane: %v", err)
		return ctrl.Result{}, true, fmt.Errorf("ensuring control plane: %w", err)
	}
	p.st = st
	if st.Endpoint == "" {
		// No endpoint yet (a hosted plane whose data is still being
		// restored, which takes as long as its etcd takes to start):
		// nothing to write a kubeconfig for or connect to.
		computeStatus(cl, st)
		return ctrl.Result{RequeueAfter: time.Second}, true, nil
	}
	if p.kubeconfig, err = r.ensureKubeconfig(ctx, cl, p.bundle, st.Endpoint); err != nil {
		return stop(cl, err)
	}
	cl.Status.Endpoint = st.Endpoint
	cl.Status.KubeconfigSecret = fkev1.KubeconfigSecretName(cl.Name)
	computeStatus(cl, st)
	if cs := componentVersions(st); st.Ready() || len(cl.Status.ControlPlane) == 0 {
		cl.Status.ControlPlane = cs
	}
	if !st.Ready() {
		if p.wasReady && !st.Adopting() {
			r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, "ControlPlaneNotReady", "Monitor", "components not ready: %v", st.NotReady())
		}
		if st.Queued != "" {
			return ctrl.Result{RequeueAfter: requeueQueued}, true, nil
		}
		return ctrl.Result{RequeueAfter: startPoll(r.runtime(cl))}, true, nil
	}
	if !p.wasReady {
		logr.FromContextOrDiscard(ctx).Info("control plane ready", "cluster", p.key, "endpoint", st.Endpoint)
		r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "ControlPlaneReady", "Start", "control plane ready at %s", st.Endpoint)
	}
	r.reportAdopted(cl, p.key, st)
	return next, false, nil
}

// upgradePhase carries on an upgrade the spec asks for, and starts an
// automatic one inside the maintenance window.
func (r *Reconciler) upgradePhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	if after, handled := r.reconcileUpgrade(ctx, p.cl, p.spec, p.st, p.bundle, p.flush); handled {
		return ctrl.Result{RequeueAfter: after}, true, nil
	}
	started, autoNext, err := r.autoUpgrade(ctx, p.cl, time.Now())
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("automatic upgrade", "cluster", p.key, "error", err.Error())
	}
	if started {
		return ctrl.Result{}, true, nil // the spec change brings the next reconcile
	}
	if autoNext > 0 {
		p.requeue = min(p.requeue, autoNext)
	}
	return next, false, nil
}

// addonsPhase installs the base addons once per control plane start, then
// keeps the cluster's addons as its spec says.
func (r *Reconciler) addonsPhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	cl := p.cl
	cfg, err := clientcmd.RESTConfigFromKubeConfig(p.kubeconfig)
	if err != nil {
		setUnknown(cl, err)
		return ctrl.Result{}, true, fmt.Errorf("kubeconfig of %s: %w", p.key, err)
	}
	p.tenantCfg = cfg
	if r.Addons != nil && (!p.wasReady || !r.baseInstalled(p.key)) {
		if err := r.Addons(ctx, cfg); err != nil {
			meta.SetStatusCondition(&cl.Status.Conditions, addonsCondition(err, cl.Status.Addons, cl.Generation))
			meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{
				Type: fkev1.ConditionReady, Status: metav1.ConditionFalse, Reason: fkev1.ReasonAddonsNotReady,
				Message: "installing addons failed: " + err.Error(), ObservedGeneration: cl.Generation,
			})
			r.Recorder.Eventf(cl, nil, corev1.EventTypeWarning, "AddonsFailed", "Install", "installing addons: %v", err)
			return ctrl.Result{RequeueAfter: 5 * time.Second}, true, nil
		}
		r.base.Store(p.key, true)
	}
	if r.reconcileAddons(ctx, cl, p.key, p.st.AddonNetwork, p.bundle, cfg, nil) {
		p.requeue = requeueAddons
	}
	return next, false, nil
}

// approverPhase runs the approver of the cluster's kubelet serving
// certificates.
func (r *Reconciler) approverPhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	if r.Approvers != nil && !r.Approvers.Running(p.key) {
		if err := r.startApprover(p.key, p.kubeconfig); err != nil {
			logr.FromContextOrDiscard(ctx).Info("starting serving approver failed", "cluster", p.key, "error", err.Error())
			return ctrl.Result{RequeueAfter: requeueStarting}, true, nil
		}
	}
	return next, false, nil
}

// versionPhase records the version the API server reports.
func (r *Reconciler) versionPhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	if r.Versioner != nil && (p.cl.Status.Version == "" || !p.wasReady) {
		v, err := r.Versioner(ctx, p.st.Endpoint, p.kubeconfig)
		if err != nil {
			logr.FromContextOrDiscard(ctx).Info("reading API server version failed", "cluster", p.key, "error", err.Error())
			return ctrl.Result{RequeueAfter: requeueStarting}, true, nil
		}
		p.cl.Status.Version = v
	}
	return next, false, nil
}
