package nodepool

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/phases"
	"fke.dev/fke/internal/tenant"
	"fke.dev/fke/internal/versions"
)

// pass is one reconcile of a live NodePool: what its phases read and what
// each leaves for the next.
type pass struct {
	key      string
	np       *fkev1.NodePool
	machines []*fkev1.Machine
	desired  int

	cl     *fkev1.Cluster
	it     *fkev1.InstanceType
	tenant *tenant.Tenant
	// live are the machines not being deleted, members their view for Decide.
	live       []*fkev1.Machine
	members    []Member
	usage      map[string]usage
	hash       string
	version    string
	repairNext time.Time
}

// phases are the steps of a pass over a live NodePool, in order; the last
// one always ends it.
func (r *Reconciler) phases() []phases.Phase[*pass] {
	return []phases.Phase[*pass]{
		{Name: "prerequisites", Run: r.prerequisitesPhase},
		{Name: "gpu agent", Run: r.gpuAgentPhase},
		{Name: "members", Run: r.membersPhase},
		{Name: "repair", Run: r.repairPhase},
		{Name: "scale", Run: r.scalePhase},
	}
}

// prerequisitesPhase waits for the pool's cluster (Ready) and instance
// type, saying which is missing.
func (r *Reconciler) prerequisitesPhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	np := p.np
	p.cl = &fkev1.Cluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: np.Namespace, Name: np.Spec.ClusterName}, p.cl); err != nil {
		if apierrors.IsNotFound(err) {
			setCondition(np, metav1.ConditionFalse, fkev1.ReasonClusterNotReady, fmt.Sprintf("cluster %s does not exist", np.Spec.ClusterName))
			return ctrl.Result{RequeueAfter: 5 * time.Second}, true, nil
		}
		return ctrl.Result{}, true, err
	}
	p.it = &fkev1.InstanceType{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: np.Spec.InstanceType}, p.it); err != nil {
		if apierrors.IsNotFound(err) {
			msg := fmt.Sprintf("instance type %s does not exist: list them with `fke instancetypes`", np.Spec.InstanceType)
			setCondition(np, metav1.ConditionFalse, fkev1.ReasonInvalidSpec, msg)
			return ctrl.Result{RequeueAfter: 30 * time.Second}, true, nil
		}
		return ctrl.Result{}, true, err
	}
	if !meta.IsStatusConditionTrue(p.cl.Status.Conditions, fkev1.ConditionReady) {
		setCondition(np, metav1.ConditionFalse, fkev1.ReasonClusterNotReady, "waiting for cluster "+p.cl.Name+" to be ready")
		return ctrl.Result{RequeueAfter: 2 * time.Second}, true, nil
	}
	t, err := r.Tenants.Get(ctx, client.ObjectKeyFromObject(p.cl).String())
	if err != nil {
		return ctrl.Result{}, true, err
	}
	p.tenant = t
	return ctrl.Result{}, false, nil
}

// gpuAgentPhase installs the GPU agent for a local GPU pool.
func (r *Reconciler) gpuAgentPhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	if r.GPUAgents != nil && p.np.Spec.Provider == fkev1.ProviderLocal && p.it.Spec.GPU != nil {
		if err := r.GPUAgents.Ensure(ctx, p.tenant, p.np, p.it); err != nil {
			setCondition(p.np, metav1.ConditionFalse, fkev1.ReasonGPUAgentFailed, "installing the GPU agent: "+err.Error())
			return ctrl.Result{}, true, fmt.Errorf("GPU agent of pool %s: %w", p.np.Name, err)
		}
	}
	return ctrl.Result{}, false, nil
}

// membersPhase describes each live machine for Decide: ready, outdated
// (template or version), its pods and utilization.
func (r *Reconciler) membersPhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	p.hash = TemplateHash(p.np)
	p.version = PoolVersion(p.np, p.cl)
	usage, kept, err := nodeUsage(ctx, p.tenant, p.machines, r.keptUsage(p.key))
	if err != nil {
		return ctrl.Result{}, true, err
	}
	r.keepUsage(p.key, kept)
	p.usage = usage
	p.members = make([]Member, 0, len(p.machines))
	for _, m := range p.machines {
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		p.live = append(p.live, m)
		u := usage[m.Status.NodeName]
		p.members = append(p.members, Member{
			Name: m.Name, Ready: meta.IsStatusConditionTrue(m.Status.Conditions, fkev1.ConditionReady),
			Outdated: m.Spec.TemplateHash != p.hash || versions.OrDefault(m.Spec.Version) != p.version, Pods: u.pods, Utilization: u.utilization,
			CreatedUnix: m.CreationTimestamp.Unix(), Marked: m.Annotations[fkev1.AnnotationScaleDown] == "true",
		})
	}
	return ctrl.Result{}, false, nil
}

// repairPhase replaces unhealthy machines (auto-repair).
func (r *Reconciler) repairPhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	requeue, repairNext, err := r.repair(ctx, p.np, p.live)
	if err != nil || requeue > 0 {
		return ctrl.Result{RequeueAfter: requeue}, true, err
	}
	p.repairNext = repairNext
	return ctrl.Result{}, false, nil
}

// scalePhase creates, deletes and replaces machines as Decide plans, and
// reports the pool's status.
func (r *Reconciler) scalePhase(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	np := p.np
	plan := Decide(p.desired, p.members, np.Spec.Upgrade.MaxSurge, np.Spec.Upgrade.MaxUnavailable)
	if err := r.apply(ctx, np, p.hash, p.version, plan, len(p.live), p.desired); err != nil {
		return ctrl.Result{}, true, err
	}
	computeStatus(np, p.machines, p.usage, plan, p.desired)
	if plan.Create > 0 || len(plan.Delete) > 0 || plan.Rolling || np.Status.ReadyReplicas != int32(p.desired) {
		return ctrl.Result{RequeueAfter: 2 * time.Second}, true, nil
	}
	next := time.Minute
	if !p.repairNext.IsZero() {
		next = min(next, max(time.Until(p.repairNext)+100*time.Millisecond, time.Second))
	}
	return ctrl.Result{RequeueAfter: next}, true, nil
}
