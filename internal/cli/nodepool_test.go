package cli

import (
	"strings"
	"testing"

	fkev1 "fke.dev/fke/api/v1alpha1"

	corev1 "k8s.io/api/core/v1"
)

func TestBuildPool(t *testing.T) {
	tests := []struct {
		name                     string
		o                        poolOptions
		replicasSet, minSet, max bool
		wantErr                  string
		check                    func(t *testing.T, np *fkev1.NodePool)
	}{
		{name: "fixed size", o: poolOptions{instanceType: "cpu-small", replicas: 2}, replicasSet: true},
		{name: "no instance type", o: poolOptions{replicas: 1}, wantErr: "--instance-type is required"},
		{name: "negative replicas", o: poolOptions{instanceType: "cpu-small", replicas: -1}, replicasSet: true, wantErr: "must not be negative"},
		{name: "min above max", o: poolOptions{instanceType: "cpu-small", min: 3, max: 1}, minSet: true, max: true, wantErr: "--min 3 is greater than --max 1"},
		{name: "only min", o: poolOptions{instanceType: "cpu-small", min: 1}, minSet: true, wantErr: "both --min and --max"},
		{name: "replicas and autoscaling", o: poolOptions{instanceType: "cpu-small", min: 0, max: 2}, replicasSet: true, minSet: true, max: true, wantErr: "not both"},
		{name: "bad label", o: poolOptions{instanceType: "cpu-small", labels: []string{"novalue"}}, wantErr: "KEY=VALUE"},
		{name: "bad taint effect", o: poolOptions{instanceType: "cpu-small", taints: []string{"a=b:Sometimes"}}, wantErr: "effect must be"},
		{name: "taint without effect", o: poolOptions{instanceType: "cpu-small", taints: []string{"a=b"}}, wantErr: "KEY[=VALUE]:EFFECT"},
		{name: "GPU sharing", o: poolOptions{instanceType: "gpu-h100x8", replicas: 1, gpuReplicas: 4, migStrategy: "mixed"}, replicasSet: true,
			check: func(t *testing.T, np *fkev1.NodePool) {
				if g := np.Spec.GPU; g == nil || g.TimeSlicingReplicas != 4 || g.MIGStrategy != "mixed" {
					t.Errorf("spec.gpu %+v", g)
				}
			}},
		{name: "bad MIG strategy", o: poolOptions{instanceType: "gpu-h100x8", migStrategy: "all"}, wantErr: "--mig-strategy"},
		{name: "too many replicas", o: poolOptions{instanceType: "gpu-h100x8", gpuReplicas: 65}, wantErr: "--gpu-time-slicing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			np, err := buildPool("default", "demo", "p", tt.o, tt.replicasSet, tt.minSet, tt.max)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || np == nil {
				t.Fatalf("buildPool: %v", err)
			}
			if tt.check != nil {
				tt.check(t, np)
			}
		})
	}
}

func TestParseTaint(t *testing.T) {
	got, err := parseTaint("dedicated=ssd:NoSchedule")
	if err != nil || got.Key != "dedicated" || got.Value != "ssd" || got.Effect != corev1.TaintEffectNoSchedule {
		t.Fatalf("parseTaint = %+v, %v", got, err)
	}
	got, err = parseTaint("gpu:NoExecute")
	if err != nil || got.Key != "gpu" || got.Value != "" || got.Effect != corev1.TaintEffectNoExecute {
		t.Fatalf("parseTaint = %+v, %v", got, err)
	}
}

func TestParsePoolShortcut(t *testing.T) {
	np, err := parsePoolShortcut("default", "demo", "name=gpu,type=gpu-h100x8,min=0,max=4,unneeded=30s")
	if err != nil {
		t.Fatal(err)
	}
	if np.Spec.Autoscaling == nil || np.Spec.Autoscaling.MaxSize != 4 || np.Spec.Autoscaling.ScaleDownUnneededTime.Duration.String() != "30s" {
		t.Fatalf("pool %+v", np.Spec)
	}
	for spec, want := range map[string]string{
		"name=gpu,type=x,color=red": "unknown key",
		"name=Bad,type=x":           "invalid node pool name",
		"name=gpu,type=x,max=many":  "must be a number",
	} {
		if _, err := parsePoolShortcut("default", "demo", spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", spec, err, want)
		}
	}
}
