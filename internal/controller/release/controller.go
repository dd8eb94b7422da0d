// Package release is the controller of Releases: it polls a git source,
// renders it with fke's applier (internal/deploy) and applies it to the
// target clusters stage by stage, promoting a revision to the next stage
// once the stage before has been healthy with it for the soak time (and
// approved, where asked), rolling a stage back when a sync does not become
// healthy or when a revision it was healthy with turns unhealthy for longer
// than spec.unhealthyTimeout, and reporting health and drift per target. Which revision each
// stage gets is decided by internal/promotion.
package release

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/promotion"
)

// Connector gives the admin rest config of a tenant cluster.
type Connector interface {
	// Config returns the rest config of the cluster with key
	// "namespace/name"; an error when it cannot be reached.
	Config(ctx context.Context, clusterKey string) (*rest.Config, error)
}

// Reconciler reconciles Releases.
type Reconciler struct {
	Client client.Client
	// APIReader reads Releases from the API server, not the cache: a call
	// that comes right after a sync must see the status that sync wrote,
	// or it takes the stage's old revision for the current one and syncs
	// again (and, should the app turn unhealthy meanwhile, rolls back
	// with a stale idea of what was healthy). Nil reads through Client.
	APIReader client.Reader

	Clusters Connector
	Recorder events.EventRecorder
	// CacheDir holds a clone of each Release's repository.
	CacheDir string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager registers the controller: Releases (their spec and
// annotations: sync and approval requests) and the Clusters of their
// namespace (a new cluster may match a stage's selector).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("release").
		For(&fkev1.Release{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&fkev1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.releasesOfNamespace), builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

func (r *Reconciler) releasesOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list fkev1.ReleaseList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, rel := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&rel)})
	}
	return out
}

// Reconcile fetches, decides and syncs one Release; one stage is synced
// per call, and the next call comes at once when more is to do.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	log := ctrl.LoggerFrom(ctx)
	rel := &fkev1.Release{}
	reader := client.Reader(r.Client)
	if r.APIReader != nil {
		reader = r.APIReader
	}
	if err := reader.Get(ctx, req.NamespacedName, rel); err != nil {
		if apierrors.IsNotFound(err) {
			// A deleted Release leaves its apps running; only its cache goes.
			_ = os.RemoveAll(r.repoDir(req.Namespace, req.Name))
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := rel.DeepCopy()
	defer func() {
		if equality.Semantic.DeepEqual(before.Status, rel.Status) {
			return
		}
		if perr := r.Client.Status().Patch(ctx, rel, client.MergeFrom(before)); perr != nil && err == nil && !apierrors.IsNotFound(perr) {
			err = fmt.Errorf("patching status of release %s: %w", req.NamespacedName, perr)
		}
	}()
	now := r.now()
	if rel.Spec.Suspend {
		setCondition(rel, fkev1.ConditionSuspended, metav1.ConditionTrue, fkev1.ReasonSuspended, "suspended: nothing is fetched or applied (fke release resume)")
		setCondition(rel, fkev1.ConditionReady, metav1.ConditionFalse, fkev1.ReasonSuspended, "suspended")
		return ctrl.Result{}, nil
	}
	setCondition(rel, fkev1.ConditionSuspended, metav1.ConditionFalse, fkev1.ReasonActive, "")

	interval := rel.PollInterval()
	requested := rel.Annotations[fkev1.AnnotationSyncRequested]
	due := rel.Status.LastFetched == nil || now.Sub(rel.Status.LastFetched.Time) >= interval ||
		requested != rel.Status.SyncRequest || rel.Status.ObservedGeneration != rel.Generation
	if due {
		r.fetch(ctx, rel, now)
		rel.Status.SyncRequest = requested
	}
	rel.Status.ObservedGeneration = rel.Generation

	targets, err := r.targets(ctx, rel)
	if err != nil {
		return ctrl.Result{}, err
	}
	alignStages(rel, targets)
	for i := range rel.Status.Stages {
		st := &rel.Status.Stages[i]
		if cfg := stageConfig(rel, st.Name); st.Config != "" && st.Config != cfg {
			// New render inputs: what failed with the old ones may work.
			st.FailedRevision = ""
		}
	}
	for i := range rel.Status.Stages {
		r.observe(ctx, rel, &rel.Status.Stages[i], targets[rel.Status.Stages[i].Name], now)
	}
	next := interval - now.Sub(rel.Status.LastFetched.Time)
	in := promotionInput(rel, now)
	for i := range rel.Status.Stages {
		st := &rel.Status.Stages[i]
		reg := promotion.Regressed(in.Stages[i], regressionTargets(st), rel.UnhealthyTimeoutDuration(), now)
		if reg.Failed != "" {
			log.Info("stage turned unhealthy", "stage", st.Name, "revision", reg.Failed, "rollbackTo", reg.To, "clusters", reg.Targets)
			r.regress(ctx, rel, st, targets[st.Name], reg)
			summarize(rel)
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
		if reg.After > 0 && reg.After < next {
			next = reg.After
		}
	}
	decisions := promotion.Decide(in)
	for i, d := range decisions {
		st := &rel.Status.Stages[i]
		st.Pending, st.Waiting = d.Pending, d.Waiting
		if d.After > 0 && d.After < next {
			next = d.After
		}
		if d.Revision != st.Revision || lagging(st, targets[st.Name], stageConfig(rel, st.Name)) {
			log.Info("syncing stage", "stage", st.Name, "revision", d.Revision)
			r.syncStage(ctx, rel, st, targets[st.Name], d.Revision)
			// The stages after it wait on its outcome: say for what.
			for j, later := range promotion.Decide(promotionInput(rel, r.now())) {
				if j > i {
					rel.Status.Stages[j].Pending, rel.Status.Stages[j].Waiting = later.Pending, later.Waiting
				}
			}
			summarize(rel)
			// The next stage is decided again with this one's outcome.
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
	}
	summarize(rel)
	if next < time.Second {
		next = time.Second
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

func (r *Reconciler) repoDir(namespace, name string) string {
	return filepath.Join(r.CacheDir, namespace, name)
}

// promotionInput turns a Release's spec, annotations and status into the
// decision's input.
func promotionInput(rel *fkev1.Release, now time.Time) promotion.Input {
	in := promotion.Input{Source: rel.Status.Revision, Now: now, Suspended: rel.Spec.Suspend}
	for i, s := range rel.Spec.Stages {
		st := rel.Status.Stages[i]
		ps := promotion.Stage{
			Name: s.Name, Soak: s.SoakTime(), RequireApproval: s.RequireApproval,
			Approved: rel.Annotations[fkev1.AnnotationApprovePrefix+s.Name],
			Revision: st.Revision, Healthy: st.Healthy, HealthyRevision: st.HealthyRevision, FailedRevision: st.FailedRevision,
			PreviousHealthyRevision: st.PreviousHealthyRevision,
		}
		if st.HealthySince != nil {
			ps.HealthySince = st.HealthySince.Time
		}
		in.Stages = append(in.Stages, ps)
	}
	return in
}

// alignStages makes status.stages follow spec.stages (by name, keeping
// what is known) and each stage's targets follow its clusters.
func alignStages(rel *fkev1.Release, targets map[string][]fkev1.Cluster) {
	old := map[string]fkev1.ReleaseStageStatus{}
	for _, s := range rel.Status.Stages {
		old[s.Name] = s
	}
	stages := make([]fkev1.ReleaseStageStatus, 0, len(rel.Spec.Stages))
	for _, s := range rel.Spec.Stages {
		st, ok := old[s.Name]
		if !ok {
			st = fkev1.ReleaseStageStatus{Name: s.Name}
		}
		known := map[string]fkev1.ReleaseTargetStatus{}
		for _, t := range st.Targets {
			known[t.Cluster] = t
		}
		st.Targets = nil
		for _, cl := range targets[s.Name] {
			t, ok := known[cl.Name]
			if !ok {
				t = fkev1.ReleaseTargetStatus{Cluster: cl.Name}
			}
			st.Targets = append(st.Targets, t)
		}
		stages = append(stages, st)
	}
	rel.Status.Stages = stages
}

func setCondition(rel *fkev1.Release, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&rel.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: rel.Generation,
	})
}

func (r *Reconciler) event(rel *fkev1.Release, warning bool, reason, format string, args ...any) {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(rel, nil, typ, reason, "Release", format, args...)
}
