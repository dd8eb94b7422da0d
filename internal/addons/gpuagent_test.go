package addons

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	gpuconfig "fke.dev/fke/internal/gpu/config"
)

func TestGPUAgentConfig(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        GPUAgentOptions
		replicas int
		mig      gpuconfig.MIGStrategy
		err      string
	}{
		{"plain mock", GPUAgentOptions{Pool: "gpu", Backend: "mock:dgxh100"}, 0, gpuconfig.MIGStrategyNone, ""},
		{"time-sliced", GPUAgentOptions{Pool: "gpu", Backend: "mock:dgxh100", TimeSlicingReplicas: 4}, 4, gpuconfig.MIGStrategyNone, ""},
		{"one replica shares nothing", GPUAgentOptions{Pool: "gpu", Backend: "real", TimeSlicingReplicas: 1}, 0, gpuconfig.MIGStrategyNone, ""},
		{"MIG mixed", GPUAgentOptions{Pool: "gpu", Backend: "real", MIGStrategy: "mixed"}, 0, gpuconfig.MIGStrategyMixed, ""},
		{"bad MIG strategy", GPUAgentOptions{Pool: "gpu", Backend: "real", MIGStrategy: "some"}, 0, "", "migStrategy"},
		{"unknown mock", GPUAgentOptions{Pool: "gpu", Backend: "mock:dgx1"}, 0, "", "unknown mock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := GPUAgentConfig(tc.o)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The agent reads it back with its own strict parser.
			cfg, err := gpuconfig.Parse(data)
			if err != nil {
				t.Fatalf("the agent refuses its config: %v\n%s", err, data)
			}
			if cfg.Backend != tc.o.Backend || cfg.MIGStrategy != tc.mig || cfg.DevicePlugin.DriverRoot != "/host" || cfg.NodeName != "" {
				t.Errorf("config %+v", cfg)
			}
			got := 0
			if ts := cfg.Sharing.TimeSlicing; ts != nil {
				got = ts.Resources[0].Replicas
			}
			if got != tc.replicas {
				t.Errorf("replicas %d, want %d", got, tc.replicas)
			}
		})
	}
}

func TestGPUAgentDaemonSet(t *testing.T) {
	o := GPUAgentOptions{Pool: "gpu", Image: "172.29.0.1:5000/fke/gpu-agent:v1", Backend: "mock:dgxh100"}
	a, _ := GPUAgentConfig(o)
	b, err := GPUAgentConfig(GPUAgentOptions{Pool: "gpu", Backend: "mock:dgxh100", TimeSlicingReplicas: 2})
	if err != nil || len(a) == 0 {
		t.Fatal(err)
	}
	ds := gpuAgentDaemonSet(o, nil, a)
	pod := ds.Spec.Template.Spec
	if pod.NodeSelector[gpuAgentPoolLabel] != "gpu" {
		t.Errorf("node selector %v: the agent must run on the pool's nodes only", pod.NodeSelector)
	}
	if len(pod.Tolerations) != 1 || *pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != nil {
		t.Errorf("tolerations %+v: the agent must tolerate every taint (the GPU taint first)", pod.Tolerations)
	}
	mounts := map[string]bool{}
	for _, m := range pod.Containers[0].VolumeMounts {
		mounts[*m.MountPath] = m.ReadOnly != nil && *m.ReadOnly
	}
	if ro, ok := mounts["/host"]; !ok || !ro {
		t.Errorf("host root mount: present %v, read-only %v", ok, ro)
	}
	if _, ok := mounts[gpuconfig.DefaultPluginDir]; !ok {
		t.Error("no device-plugin directory mount")
	}
	// A new configuration changes the pod template (the agent restarts).
	hash := ds.Spec.Template.Annotations["fke.dev/config-hash"]
	if hash == "" || hash == gpuAgentDaemonSet(o, nil, b).Spec.Template.Annotations["fke.dev/config-hash"] {
		t.Errorf("config hash %q does not follow the configuration", hash)
	}
}
