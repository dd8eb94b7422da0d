package controlplane

import (
	"reflect"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbase "k8s.io/component-base/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

func TestSchedulerConfigLeaderElection(t *testing.T) {
	le := LeaderElection{LeaseDuration: time.Minute, RenewDeadline: 40 * time.Second, RetryPeriod: 10 * time.Second}
	for _, tc := range []struct {
		name string
		le   *LeaderElection
		want componentbase.LeaderElectionConfiguration
	}{
		{"no election", nil, componentbase.LeaderElectionConfiguration{LeaderElect: ptr.To(false)}},
		{"election", &le, componentbase.LeaderElectionConfiguration{
			LeaderElect:   ptr.To(true),
			LeaseDuration: metav1.Duration{Duration: time.Minute},
			RenewDeadline: metav1.Duration{Duration: 40 * time.Second},
			RetryPeriod:   metav1.Duration{Duration: 10 * time.Second},
		}},
	} {
		// Upstream's own types, strictly: a misspelt field fails here,
		// not in kube-scheduler.
		var cfg struct {
			metav1.TypeMeta  `json:",inline"`
			ClientConnection componentbase.ClientConnectionConfiguration `json:"clientConnection"`
			LeaderElection   componentbase.LeaderElectionConfiguration   `json:"leaderElection"`
		}
		if err := yaml.UnmarshalStrict(SchedulerConfig("/k", tc.le), &cfg); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cfg.Kind != "KubeSchedulerConfiguration" || cfg.ClientConnection.Kubeconfig != "/k" {
			t.Errorf("%s: kind %q, kubeconfig %q", tc.name, cfg.Kind, cfg.ClientConnection.Kubeconfig)
		}
		if !reflect.DeepEqual(cfg.LeaderElection, tc.want) {
			t.Errorf("%s: leaderElection %+v, want %+v", tc.name, cfg.LeaderElection, tc.want)
		}
	}
	flags := le.Flags()
	for _, want := range []string{"--leader-elect=true", "--leader-elect-lease-duration=1m0s", "--leader-elect-renew-deadline=40s", "--leader-elect-retry-period=10s"} {
		if !slices.Contains(flags, want) {
			t.Errorf("flags %v lack %s", flags, want)
		}
	}
}
