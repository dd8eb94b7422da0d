package release

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/deploy"
	"fke.dev/fke/internal/promotion"
)

// Target health values besides kstatus' own.
const (
	healthCurrent    = "Current"
	healthInProgress = "InProgress"
	healthFailed     = "Failed"
	healthUnknown    = "Unknown"
)

// targets returns the clusters of each stage: those named (a name with no
// Cluster yields one with only its name) and those its selector picks,
// sorted by name.
func (r *Reconciler) targets(ctx context.Context, rel *fkev1.Release) (map[string][]fkev1.Cluster, error) {
	var all fkev1.ClusterList
	if err := r.Client.List(ctx, &all, client.InNamespace(rel.Namespace)); err != nil {
		return nil, fmt.Errorf("listing clusters: %w", err)
	}
	out := map[string][]fkev1.Cluster{}
	for _, s := range rel.Spec.Stages {
		picked := map[string]fkev1.Cluster{}
		for _, name := range s.Clusters {
			picked[name] = fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: rel.Namespace}}
		}
		var sel labels.Selector
		if s.Selector != nil {
			var err error
			if sel, err = metav1.LabelSelectorAsSelector(s.Selector); err != nil {
				return nil, fmt.Errorf("stage %s: selector: %w", s.Name, err)
			}
		}
		for _, cl := range all.Items {
			_, named := picked[cl.Name]
			if named || (sel != nil && sel.Matches(labels.Set(cl.Labels))) {
				picked[cl.Name] = cl
			}
		}
		var list []fkev1.Cluster
		for _, cl := range picked {
			list = append(list, cl)
		}
		slices.SortFunc(list, func(a, b fkev1.Cluster) int { return strings.Compare(a.Name, b.Name) })
		out[s.Name] = list
	}
	return out, nil
}

// reachable says whether fke can deploy to cl now, and if not why.
func reachable(cl fkev1.Cluster) (bool, string) {
	if cl.UID == "" {
		return false, fmt.Sprintf("cluster %s does not exist", cl.Name)
	}
	if !meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionControlPlaneReady) {
		return false, fmt.Sprintf("cluster %s: control plane not ready", cl.Name)
	}
	return true, ""
}

func clusterNamed(list []fkev1.Cluster, name string) fkev1.Cluster {
	for _, cl := range list {
		if cl.Name == name {
			return cl
		}
	}
	return fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// connect returns the applier for cl.
func (r *Reconciler) connect(ctx context.Context, cl fkev1.Cluster) (*deploy.Cluster, error) {
	cfg, err := r.Clusters.Config(ctx, cl.Namespace+"/"+cl.Name)
	if err != nil {
		return nil, err
	}
	return deploy.NewCluster(cfg)
}

// observe reads the health and drift of each target of st at the revision
// it runs, corrects drift when asked, and works out whether the stage is
// healthy and since when.
func (r *Reconciler) observe(ctx context.Context, rel *fkev1.Release, st *fkev1.ReleaseStageStatus, clusters []fkev1.Cluster, now time.Time) {
	healthy := len(st.Targets) > 0 && st.Revision != ""
	for i := range st.Targets {
		t := &st.Targets[i]
		r.observeTarget(ctx, rel, t, clusterNamed(clusters, t.Cluster), now)
		if t.Revision != st.Revision || t.Health != healthCurrent {
			healthy = false
		}
	}
	switch {
	case !healthy:
		st.Healthy, st.HealthySince = false, nil
	case !st.Healthy || st.HealthySince == nil:
		st.Healthy, st.HealthySince = true, &metav1.Time{Time: now}
	}
	if st.Healthy {
		markHealthy(st, st.Revision)
	}
}

// markHealthy records that st is healthy with rev; the revision it was
// healthy with before becomes its previous healthy one, where it goes back
// to should rev turn unhealthy (never a revision that failed here).
func markHealthy(st *fkev1.ReleaseStageStatus, rev string) {
	if h := st.HealthyRevision; h != rev && h != "" && h != st.FailedRevision {
		st.PreviousHealthyRevision = h
	}
	st.HealthyRevision = rev
}

func (r *Reconciler) observeTarget(ctx context.Context, rel *fkev1.Release, t *fkev1.ReleaseTargetStatus, cl fkev1.Cluster, now time.Time) {
	// Only objects seen InProgress or Failed count as unhealthy: a cluster
	// that cannot be read says nothing of the revision.
	since := t.UnhealthySince
	t.UnhealthySince = nil
	if ok, why := reachable(cl); !ok {
		t.Health, t.Message = healthUnknown, why
		return
	}
	if t.Revision == "" {
		return
	}
	dc, err := r.connect(ctx, cl)
	if err != nil {
		t.Health, t.Message = healthUnknown, err.Error()
		return
	}
	objs, err := deployedObjects(ctx, dc, rel.Name)
	if err != nil {
		t.Health, t.Message = healthUnknown, err.Error()
		return
	}
	h, err := dc.Health(ctx, objs, rel.Spec.Namespace)
	if err != nil {
		t.Health, t.Message = healthUnknown, err.Error()
		return
	}
	t.Health, t.Message = h.Status, clip(strings.Join(h.Problems, "; "))
	if h.Status == healthInProgress || h.Status == healthFailed {
		if since == nil {
			since = &metav1.Time{Time: now}
		}
		t.UnhealthySince = since
	}
	drift, err := dc.Drift(ctx, objs, rel.Name, rel.Spec.Namespace)
	if err != nil {
		t.Message = clip(strings.TrimPrefix(t.Message+"; ", "; ") + "drift not checked: " + err.Error())
		return
	}
	if len(drift) > 0 && !slices.Equal(drift, t.Drift) {
		r.event(rel, true, fkev1.ReasonDriftDetected, "cluster %s: changed by hand: %s", t.Cluster, strings.Join(drift, ", "))
	}
	t.Drift = drift
	if len(drift) == 0 || !rel.Spec.CorrectDrift {
		return
	}
	_, err = dc.Apply(ctx, objs, deploy.Options{Release: rel.Name, Namespace: rel.Spec.Namespace, Prune: true, Wait: true, Timeout: timeout(rel)})
	if err != nil {
		t.Message = clip("correcting drift: " + err.Error())
		return
	}
	r.event(rel, false, fkev1.ReasonDriftCorrected, "cluster %s: applied again: %s", t.Cluster, strings.Join(drift, ", "))
	t.Drift, t.Health, t.Message, t.UnhealthySince = nil, healthCurrent, "", nil
}

// deployedObjects returns the objects of the release's deployed revision
// in the cluster.
func deployedObjects(ctx context.Context, dc *deploy.Cluster, release string) ([]*unstructured.Unstructured, error) {
	store := deploy.Store{Client: dc.Client}
	revs, err := store.List(ctx, release)
	if err != nil {
		return nil, err
	}
	best := 0
	for _, rv := range revs {
		if rv.Status == deploy.StatusDeployed && rv.Number > best {
			best = rv.Number
		}
	}
	if best == 0 {
		return nil, fmt.Errorf("no deployed revision of %s in the cluster", release)
	}
	return store.Objects(ctx, release, best)
}

func timeout(rel *fkev1.Release) time.Duration { return rel.SyncTimeout() }

// clip makes s one line (deploy's errors list objects one per line) of at
// most 1000 bytes, for a status field or condition.
func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 1000 {
		return s[:1000] + "…"
	}
	return s
}

// lagging reports whether st must be synced again at its own revision: its
// render inputs changed (config), or a reachable target does not run the
// revision yet (a cluster new to the stage); not when that revision failed
// here.
func lagging(st *fkev1.ReleaseStageStatus, clusters []fkev1.Cluster, config string) bool {
	if st.Revision == "" || st.Revision == st.FailedRevision {
		return false
	}
	if st.Config != "" && st.Config != config {
		return true
	}
	for _, t := range st.Targets {
		if ok, _ := reachable(clusterNamed(clusters, t.Cluster)); ok && t.Revision != st.Revision {
			return true
		}
	}
	return false
}

// syncStage applies rev to every target of st that does not run it; when
// a target does not become healthy within the timeout, the stage goes back
// to its last healthy revision and promotion stops there.
func (r *Reconciler) syncStage(ctx context.Context, rel *fkev1.Release, st *fkev1.ReleaseStageStatus, clusters []fkev1.Cluster, rev string) {
	start := r.now()
	config := stageConfig(rel, st.Name)
	configChanged := st.Config != config
	st.Config = config
	path := stagePath(rel, st.Name)
	rendered, err := r.render(ctx, rel, rev, path)
	if err != nil {
		st.FailedRevision = rev
		msg := fmt.Sprintf("stage %s: %v", st.Name, err)
		setCondition(rel, fkev1.ConditionPromoting, metav1.ConditionFalse, fkev1.ReasonSyncFailed, msg)
		r.event(rel, true, fkev1.ReasonSyncFailed, "%s", msg)
		return
	}
	var failures []string
	attempted := map[string]bool{}
	for i := range st.Targets {
		t := &st.Targets[i]
		if t.Revision == rev && t.Health == healthCurrent && !configChanged {
			continue
		}
		cl := clusterNamed(clusters, t.Cluster)
		if ok, why := reachable(cl); !ok {
			failures = append(failures, why)
			continue
		}
		attempted[t.Cluster] = true
		if err := r.apply(ctx, rel, cl, t, rendered, rev, path); err != nil {
			failures = append(failures, fmt.Sprintf("cluster %s: %v", t.Cluster, err))
		}
	}
	took := r.now().Sub(start).Round(100 * time.Millisecond)
	if len(failures) == 0 {
		st.Revision, st.Healthy = rev, true
		markHealthy(st, rev)
		st.HealthySince = &metav1.Time{Time: r.now()}
		msg := fmt.Sprintf("stage %s runs revision %s on %d cluster(s), Current after %s", st.Name, promotion.Short(rev), len(st.Targets), took)
		r.event(rel, false, "Synced", "%s", msg)
		setCondition(rel, fkev1.ConditionPromoting, metav1.ConditionTrue, fkev1.ReasonPromoted, msg)
		return
	}
	why := clip(strings.Join(failures, "; "))
	st.FailedRevision, st.Healthy, st.HealthySince = rev, false, nil
	to, ok := promotion.Rollback(promotion.Stage{Revision: st.Revision, HealthyRevision: st.HealthyRevision}, rev)
	if !ok {
		st.Revision = rev
		msg := fmt.Sprintf("stage %s: revision %s did not become healthy and there is no healthy revision to go back to: %s", st.Name, promotion.Short(rev), why)
		if configChanged && rev == st.HealthyRevision {
			msg = fmt.Sprintf("stage %s: revision %s did not become healthy with the Release's new path or values: %s", st.Name, promotion.Short(rev), why)
		}
		setCondition(rel, fkev1.ConditionPromoting, metav1.ConditionFalse, fkev1.ReasonSyncFailed, msg)
		r.event(rel, true, fkev1.ReasonSyncFailed, "%s", msg)
		return
	}
	back, err := r.render(ctx, rel, to, path)
	if err == nil {
		for i := range st.Targets {
			t := &st.Targets[i]
			if attempted[t.Cluster] {
				if aerr := r.apply(ctx, rel, clusterNamed(clusters, t.Cluster), t, back, to, path); aerr != nil {
					err = fmt.Errorf("cluster %s: %w", t.Cluster, aerr)
				}
			}
		}
	}
	st.Revision = to
	msg := fmt.Sprintf("stage %s: revision %s did not become healthy within %s (%s); rolled back to %s; promotion stopped", st.Name, promotion.Short(rev), timeout(rel), why, promotion.Short(to))
	if err != nil {
		msg += fmt.Sprintf("; the rollback failed too: %v", err)
	}
	setCondition(rel, fkev1.ConditionPromoting, metav1.ConditionFalse, fkev1.ReasonRolledBack, msg)
	r.event(rel, true, fkev1.ReasonRolledBack, "%s", msg)
}

// apply deploys rendered (commit rev) to cl and records the outcome in t.
func (r *Reconciler) apply(ctx context.Context, rel *fkev1.Release, cl fkev1.Cluster, t *fkev1.ReleaseTargetStatus, rendered *deploy.Rendered, rev, path string) error {
	dc, err := r.connect(ctx, cl)
	if err != nil {
		t.Health, t.Message = healthUnknown, err.Error()
		return err
	}
	d := deploy.Deployer{Cluster: dc, Now: r.Now}
	src := rel.Spec.Source
	out, err := d.Deploy(ctx, deploy.Request{
		Options:  deploy.Options{Release: rel.Name, Namespace: rel.Spec.Namespace, Prune: true, Wait: true, Timeout: timeout(rel)},
		Rendered: rendered,
		Source:   fmt.Sprintf("%s@%s:%s", src.URL, promotion.Short(rev), path),
	})
	t.UnhealthySince = nil // the apply's outcome replaces what was observed
	if err != nil {
		t.Health, t.Message = healthFailed, clip(err.Error())
		return err
	}
	t.Revision, t.DeployRevision, t.Health, t.Message, t.Drift = rev, out.Revision, healthCurrent, "", nil
	t.LastApplied = &metav1.Time{Time: r.now()}
	return nil
}

// summarize sets Ready and Drifted from the stages.
func summarize(rel *fkev1.Release) {
	var drifted, unhealthy []string
	var runs []string
	for _, st := range rel.Status.Stages {
		runs = append(runs, fmt.Sprintf("%s: %s", st.Name, orNone(promotion.Short(st.Revision))))
		for _, t := range st.Targets {
			for _, d := range t.Drift {
				drifted = append(drifted, t.Cluster+": "+d)
			}
		}
		switch {
		case len(st.Targets) == 0:
			unhealthy = append(unhealthy, fmt.Sprintf("stage %s has no clusters", st.Name))
		case !st.Healthy:
			var bad []string
			for _, t := range st.Targets {
				if t.Health != healthCurrent || t.Revision != st.Revision {
					bad = append(bad, fmt.Sprintf("%s %s %s", t.Cluster, orNone(t.Health), t.Message))
				}
			}
			unhealthy = append(unhealthy, fmt.Sprintf("stage %s: %s", st.Name, strings.Join(bad, "; ")))
		}
	}
	if len(drifted) > 0 {
		setCondition(rel, fkev1.ConditionDrifted, metav1.ConditionTrue, fkev1.ReasonDriftDetected, clip("changed by hand: "+strings.Join(drifted, ", ")))
	} else {
		setCondition(rel, fkev1.ConditionDrifted, metav1.ConditionFalse, fkev1.ReasonNoDrift, "")
	}
	if len(unhealthy) > 0 {
		setCondition(rel, fkev1.ConditionReady, metav1.ConditionFalse, fkev1.ReasonUnhealthy, clip(strings.Join(unhealthy, "; ")))
		return
	}
	setCondition(rel, fkev1.ConditionReady, metav1.ConditionTrue, fkev1.ReasonReady, strings.Join(runs, ", "))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
