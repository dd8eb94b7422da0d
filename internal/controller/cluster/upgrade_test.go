package cluster

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/controlplane"
)

func TestNextUpgradeStep(t *testing.T) {
	const old, cur = "v1.36.3", "v1.37.2"
	at := func(api, cm, sched string) map[string]string {
		return map[string]string{controlplane.Etcd: "", controlplane.APIServer: api, controlplane.ControllerManager: cm, controlplane.Scheduler: sched}
	}
	done := metav1.Now()
	cases := []struct {
		name    string
		target  string
		running map[string]string
		up      *fkev1.UpgradeStatus
		want    string
	}{
		{"nothing to do", cur, at(cur, cur, cur), nil, ""},
		{"finished upgrade stays finished", cur, at(cur, cur, cur), &fkev1.UpgradeStatus{To: cur, Snapshot: "s", CompletionTime: &done}, ""},
		{"snapshot first", cur, at(old, old, old), nil, StepSnapshot},
		{"a new target takes a new snapshot", cur, at(old, old, old), &fkev1.UpgradeStatus{To: "v1.36.9", Snapshot: "s"}, StepSnapshot},
		{"an earlier finished upgrade takes a new snapshot", cur, at(old, old, old), &fkev1.UpgradeStatus{To: cur, Snapshot: "s", CompletionTime: &done}, StepSnapshot},
		{"failed snapshot is tried again", cur, at(old, old, old), &fkev1.UpgradeStatus{To: cur}, StepSnapshot},
		{"API server after the snapshot", cur, at(old, old, old), &fkev1.UpgradeStatus{To: cur, Snapshot: "s"}, controlplane.APIServer},
		{"controller manager next", cur, at(cur, old, old), &fkev1.UpgradeStatus{To: cur, Snapshot: "s"}, controlplane.ControllerManager},
		{"scheduler next", cur, at(cur, cur, old), &fkev1.UpgradeStatus{To: cur, Snapshot: "s"}, controlplane.Scheduler},
		{"addons last", cur, at(cur, cur, cur), &fkev1.UpgradeStatus{To: cur, Snapshot: "s"}, StepAddons},
		{"API server first even if others moved (restart mid-way)", cur, at(old, cur, old), &fkev1.UpgradeStatus{To: cur, Snapshot: "s"}, controlplane.APIServer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NextUpgradeStep(c.target, c.running, c.up); got != c.want {
				t.Errorf("NextUpgradeStep = %q, want %q", got, c.want)
			}
		})
	}
}

func TestStartVersions(t *testing.T) {
	cl := &fkev1.Cluster{Status: fkev1.ClusterStatus{ControlPlane: []fkev1.ComponentVersion{
		{Name: controlplane.Etcd}, {Name: controlplane.APIServer, Version: "v1.37.2"}, {Name: controlplane.Scheduler, Version: "v1.36.3"},
	}}}
	got := startVersions(cl)
	if len(got) != 2 || got[controlplane.APIServer] != "v1.37.2" || got[controlplane.Scheduler] != "v1.36.3" {
		t.Errorf("startVersions = %v", got)
	}
}
