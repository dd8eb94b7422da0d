package controlplane

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbase "k8s.io/component-base/config/v1alpha1"
	"sigs.k8s.io/yaml"
)

func TestSchedulerConfigLeaderElection(t *testing.T) {
	le := LeaderElection{LeaseDuration: time.Minute, RenewDeadline: 40 * time.Second, RetryPeriod: 10 * time.Second}
	for _, tc := range []struct {
		name string
		le   *LeaderElection
		want map[string]any
	}{
		{"no election", nil, map[string]any{"leaderElect": false}},
		{"election", &le, map[string]any{"leaderElect": true, "leaseDuration": "1m0s", "renewDeadline": "40s", "retryPeriod": "10s"}},
	} {
		raw := SchedulerConfig("/k", tc.le)
		// Upstream's own types, strictly: a misspelt field fails here,
		// not in kube-scheduler.
		var typed struct {
			metav1.TypeMeta  `json:",inline"`
			ClientConnection componentbase.ClientConnectionConfiguration `json:"clientConnection"`
			LeaderElection   componentbase.LeaderElectionConfiguration   `json:"leaderElection"`
		}
		if err := yaml.UnmarshalStrict(raw, &typed); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var cfg struct {
			Kind             string         `json:"kind"`
			LeaderElection   map[string]any `json:"leaderElection"`
			ClientConnection struct {
				Kubeconfig string `json:"kubeconfig"`
			} `json:"clientConnection"`
		}
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cfg.Kind != "KubeSchedulerConfiguration" || cfg.ClientConnection.Kubeconfig != "/k" {
			t.Errorf("%s: kind %q, kubeconfig %q", tc.name, cfg.Kind, cfg.ClientConnection.Kubeconfig)
		}
		if len(cfg.LeaderElection) != len(tc.want) {
			t.Errorf("%s: leaderElection %v, want %v", tc.name, cfg.LeaderElection, tc.want)
		}
		for k, v := range tc.want {
			if cfg.LeaderElection[k] != v {
				t.Errorf("%s: leaderElection.%s = %v, want %v", tc.name, k, cfg.LeaderElection[k], v)
			}
		}
	}
	flags := le.Flags()
	for _, want := range []string{"--leader-elect=true", "--leader-elect-lease-duration=1m0s", "--leader-elect-renew-deadline=40s", "--leader-elect-retry-period=10s"} {
		if !slices.Contains(flags, want) {
			t.Errorf("flags %v lack %s", flags, want)
		}
	}
}
