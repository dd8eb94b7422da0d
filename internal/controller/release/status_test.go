package release

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

func testRelease() *fkev1.Release {
	return &fkev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "default", Annotations: map[string]string{fkev1.AnnotationApprovePrefix + "prod": "b2"}},
		Spec: fkev1.ReleaseSpec{
			Source: fkev1.ReleaseSource{URL: "file:///r", Path: "app"},
			Stages: []fkev1.ReleaseStage{
				{Name: "dev", Clusters: []string{"dev"}},
				{Name: "prod", Clusters: []string{"prod"}, Path: "overlays/prod", Soak: &metav1.Duration{Duration: time.Minute}, RequireApproval: true},
			},
		},
	}
}

func cluster(name string) fkev1.Cluster {
	return fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func TestAlignStages(t *testing.T) {
	rel := testRelease()
	rel.Status.Stages = []fkev1.ReleaseStageStatus{
		{Name: "old"},
		{Name: "prod", Revision: "a1", Targets: []fkev1.ReleaseTargetStatus{{Cluster: "prod", Revision: "a1"}, {Cluster: "gone", Revision: "a1"}}},
	}
	alignStages(rel, map[string][]fkev1.Cluster{"dev": {cluster("dev")}, "prod": {cluster("prod"), cluster("prod-2")}})
	var got []string
	for _, st := range rel.Status.Stages {
		var ts []string
		for _, tg := range st.Targets {
			ts = append(ts, tg.Cluster+"@"+tg.Revision)
		}
		got = append(got, st.Name+":"+st.Revision+"["+strings.Join(ts, " ")+"]")
	}
	if want := "dev:[dev@] prod:a1[prod@a1 prod-2@]"; strings.Join(got, " ") != want {
		t.Errorf("stages %s, want %s", strings.Join(got, " "), want)
	}
}

func TestPromotionInputAndPaths(t *testing.T) {
	rel := testRelease()
	since := metav1.NewTime(time.Unix(100, 0))
	rel.Status.Revision = "b2"
	rel.Status.Stages = []fkev1.ReleaseStageStatus{{Name: "dev", Revision: "b2", Healthy: true, HealthySince: &since}, {Name: "prod"}}
	in := promotionInput(rel, time.Unix(200, 0))
	if in.Source != "b2" || !in.Stages[0].Healthy || !in.Stages[0].HealthySince.Equal(since.Time) {
		t.Errorf("input %+v", in)
	}
	if p := in.Stages[1]; p.Soak != time.Minute || !p.RequireApproval || p.Approved != "b2" {
		t.Errorf("prod %+v", p)
	}
	if got := stagePath(rel, "dev") + " " + stagePath(rel, "prod"); got != "app overlays/prod" {
		t.Errorf("paths %s", got)
	}
	if got := strings.Join(stagePaths(rel), ","); got != "app,overlays/prod" {
		t.Errorf("stagePaths %s", got)
	}
}

func TestSummarize(t *testing.T) {
	rel := testRelease()
	rel.Status.Stages = []fkev1.ReleaseStageStatus{
		{Name: "dev", Revision: "b2", Healthy: true, Targets: []fkev1.ReleaseTargetStatus{{Cluster: "dev", Revision: "b2", Health: "Current", Drift: []string{"ConfigMap shop/settings"}}}},
		{Name: "prod", Revision: "a1", Targets: []fkev1.ReleaseTargetStatus{{Cluster: "prod", Revision: "a1", Health: "InProgress", Message: "Deployment shop/web: 0/1"}}},
	}
	summarize(rel)
	ready := meta.FindStatusCondition(rel.Status.Conditions, fkev1.ConditionReady)
	if ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "stage prod: prod InProgress Deployment shop/web: 0/1") {
		t.Errorf("Ready %s: %s", ready.Status, ready.Message)
	}
	drift := meta.FindStatusCondition(rel.Status.Conditions, fkev1.ConditionDrifted)
	if drift.Status != metav1.ConditionTrue || drift.Message != "changed by hand: dev: ConfigMap shop/settings" {
		t.Errorf("Drifted %s: %s", drift.Status, drift.Message)
	}
	rel.Status.Stages[1] = fkev1.ReleaseStageStatus{Name: "prod", Revision: "a1", Healthy: true, Targets: []fkev1.ReleaseTargetStatus{{Cluster: "prod", Revision: "a1", Health: "Current"}}}
	rel.Status.Stages[0].Targets[0].Drift = nil
	summarize(rel)
	if ready := meta.FindStatusCondition(rel.Status.Conditions, fkev1.ConditionReady); ready.Status != metav1.ConditionTrue || ready.Message != "dev: b2, prod: a1" {
		t.Errorf("Ready %s: %s", ready.Status, ready.Message)
	}
}

func TestLagging(t *testing.T) {
	ready := fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "dev", UID: "u"}, Status: fkev1.ClusterStatus{Conditions: []metav1.Condition{{Type: fkev1.ConditionControlPlaneReady, Status: metav1.ConditionTrue}}}}
	down := fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "new", UID: "v"}}
	rel := testRelease()
	cfg := stageConfig(rel, "dev")
	cases := []struct {
		name     string
		st       fkev1.ReleaseStageStatus
		clusters []fkev1.Cluster
		want     bool
	}{
		{"in step", fkev1.ReleaseStageStatus{Revision: "a1", Config: cfg, Targets: []fkev1.ReleaseTargetStatus{{Cluster: "dev", Revision: "a1"}}}, []fkev1.Cluster{ready}, false},
		{"a new ready cluster", fkev1.ReleaseStageStatus{Revision: "a1", Config: cfg, Targets: []fkev1.ReleaseTargetStatus{{Cluster: "dev"}}}, []fkev1.Cluster{ready}, true},
		{"a new cluster not ready yet", fkev1.ReleaseStageStatus{Revision: "a1", Config: cfg, Targets: []fkev1.ReleaseTargetStatus{{Cluster: "new"}}}, []fkev1.Cluster{down}, false},
		{"new render inputs", fkev1.ReleaseStageStatus{Revision: "a1", Config: "old", Targets: []fkev1.ReleaseTargetStatus{{Cluster: "dev", Revision: "a1"}}}, []fkev1.Cluster{ready}, true},
		{"the revision failed here", fkev1.ReleaseStageStatus{Revision: "a1", FailedRevision: "a1", Config: "old", Targets: []fkev1.ReleaseTargetStatus{{Cluster: "dev"}}}, []fkev1.Cluster{ready}, false},
		{"nothing yet", fkev1.ReleaseStageStatus{Targets: []fkev1.ReleaseTargetStatus{{Cluster: "dev"}}}, []fkev1.Cluster{ready}, false},
	}
	for _, tc := range cases {
		if got := lagging(&tc.st, tc.clusters, cfg); got != tc.want {
			t.Errorf("%s: lagging = %v, want %v", tc.name, got, tc.want)
		}
	}
	other := testRelease()
	other.Spec.Source.Set = []string{"replicas=3"}
	if stageConfig(other, "dev") == cfg || stageConfig(testRelease(), "dev") != cfg {
		t.Error("stageConfig does not follow the render inputs")
	}
}

func TestMarkHealthy(t *testing.T) {
	tests := []struct {
		name                      string
		healthy, previous, failed string
		rev                       string
		wantHealthy, wantPrevious string
	}{
		{name: "first healthy revision", rev: "a1", wantHealthy: "a1"},
		{name: "a new revision keeps the one before", healthy: "a1", rev: "b2", wantHealthy: "b2", wantPrevious: "a1"},
		{name: "healthy again with the same one", healthy: "b2", previous: "a1", rev: "b2", wantHealthy: "b2", wantPrevious: "a1"},
		{name: "back on the previous one after b2 failed: b2 is not where to go next", healthy: "b2", previous: "a1", failed: "b2", rev: "a1", wantHealthy: "a1", wantPrevious: "a1"},
	}
	for _, tt := range tests {
		st := &fkev1.ReleaseStageStatus{HealthyRevision: tt.healthy, PreviousHealthyRevision: tt.previous, FailedRevision: tt.failed}
		markHealthy(st, tt.rev)
		if st.HealthyRevision != tt.wantHealthy || st.PreviousHealthyRevision != tt.wantPrevious {
			t.Errorf("%s: healthy %q previous %q, want %q and %q", tt.name, st.HealthyRevision, st.PreviousHealthyRevision, tt.wantHealthy, tt.wantPrevious)
		}
	}
}
