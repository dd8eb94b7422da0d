package config

import (
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzParse: any configuration file is refused with an error, or parses to
// a configuration that writes back to YAML and parses to a configuration
// that writes the same; Validate never panics and refuses negative durations.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "backend: mock:dgxh100\nnodeName: n1\n",
		"migStrategy: mixed\ndevicePlugin: {allocationPolicy: spread, selfCheckInterval: 10s}\n",
		"sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n",
		"health: {probeInterval: -1s, recoveryHold: 1h}\n", "labels: {interval: -5m}\n",
		"metrics: {podResourcesTTL: 1e9}\n", "unknown: 1\n", "backend: [\n", "mock: {mig: {'0': [1g.10gb]}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			return
		}
		if verr := cfg.Validate(); verr == nil {
			for _, d := range []int64{int64(cfg.DevicePlugin.SelfCheckInterval.Duration), int64(cfg.Health.RecoveryHold.Duration),
				int64(cfg.Metrics.PodResourcesTTL.Duration), int64(cfg.Labels.Interval.Duration)} {
				if d < 0 {
					t.Fatalf("%q: a negative duration validates: %+v", data, cfg)
				}
			}
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("%q: parsed but does not write back: %v", data, err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("%q: written back as %q, which does not parse: %v", data, out, err)
		}
		// Equal once written (an empty list and an absent one write alike).
		if out2, err := yaml.Marshal(again); err != nil || string(out2) != string(out) {
			t.Fatalf("%q: round trip changed the configuration:\n%s\n%s", data, out, out2)
		}
	})
}
