package release

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/promotion"
)

// regressionTargets is what promotion.Regressed needs of a stage's targets.
func regressionTargets(st *fkev1.ReleaseStageStatus) []promotion.Target {
	out := make([]promotion.Target, 0, len(st.Targets))
	for _, t := range st.Targets {
		pt := promotion.Target{Cluster: t.Cluster, Revision: t.Revision}
		if t.UnhealthySince != nil {
			pt.UnhealthySince = t.UnhealthySince.Time
		}
		out = append(out, pt)
	}
	return out
}

// regress handles a stage whose revision, healthy there before, has been
// unhealthy on reg.Targets for longer than spec.unhealthyTimeout: the
// revision is marked failed (never promoted from here nor tried again) and
// the stage goes back to reg.To on every target that runs the revision,
// or, with no earlier healthy revision, stays where it is. Either way the
// Promoting condition and a warning event say why.
func (r *Reconciler) regress(ctx context.Context, rel *fkev1.Release, st *fkev1.ReleaseStageStatus, clusters []fkev1.Cluster, reg promotion.Regression) {
	failed := reg.Failed
	st.FailedRevision, st.Healthy, st.HealthySince = failed, false, nil
	var why []string
	for _, t := range st.Targets {
		if slices.Contains(reg.Targets, t.Cluster) {
			since := ""
			if t.UnhealthySince != nil {
				since = " since " + t.UnhealthySince.UTC().Format("15:04:05")
			}
			why = append(why, fmt.Sprintf("cluster %s %s%s: %s", t.Cluster, t.Health, since, orNone(t.Message)))
		}
	}
	reason := clip(strings.Join(why, "; "))
	if reg.To == "" {
		msg := fmt.Sprintf("stage %s: revision %s was healthy, then unhealthy for more than %s (%s); there is no earlier healthy revision to go back to; promotion of %s stopped",
			st.Name, promotion.Short(failed), rel.UnhealthyTimeoutDuration(), reason, promotion.Short(failed))
		setCondition(rel, fkev1.ConditionPromoting, metav1.ConditionFalse, fkev1.ReasonUnhealthy, msg)
		r.event(rel, true, fkev1.ReasonUnhealthy, "%s", msg)
		return
	}
	path := stagePath(rel, st.Name)
	back, err := r.render(ctx, rel, reg.To, path)
	if err == nil {
		for i := range st.Targets {
			t := &st.Targets[i]
			cl := clusterNamed(clusters, t.Cluster)
			if ok, _ := reachable(cl); !ok || t.Revision != failed {
				continue // a target out of reach follows the stage once it is back (lagging)
			}
			if aerr := r.apply(ctx, rel, cl, t, back, reg.To, path); aerr != nil {
				err = fmt.Errorf("cluster %s: %w", t.Cluster, aerr)
			}
		}
	}
	st.Revision = reg.To
	msg := fmt.Sprintf("stage %s: revision %s was healthy, then unhealthy for more than %s (%s); rolled back to %s; promotion of %s stopped",
		st.Name, promotion.Short(failed), rel.UnhealthyTimeoutDuration(), reason, promotion.Short(reg.To), promotion.Short(failed))
	if err != nil {
		msg += fmt.Sprintf("; the rollback failed too: %v", err)
	}
	setCondition(rel, fkev1.ConditionPromoting, metav1.ConditionFalse, fkev1.ReasonRolledBack, clip(msg))
	r.event(rel, true, fkev1.ReasonRolledBack, "%s", clip(msg))
}
