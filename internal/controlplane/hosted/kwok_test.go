package hosted

import (
	"slices"
	"testing"

	"fke.dev/fke/internal/controlplane"
	appsv1 "k8s.io/api/apps/v1"
)

// TestKwokDeployment: one kwok at a time (Recreate), its files read-only
// from its Secret, probed on its /healthz, unprivileged like the
// control-plane components, rolled when its files change.
func TestKwokDeployment(t *testing.T) {
	d := kwokDeployment("fke-team-h", "reg/fke/kwok:v0.8.0", []string{"--config=/etc/kwok/kwok.yaml"}, "h1", []string{"kubeconfig", "kwok.yaml"})
	if d.Namespace != "fke-team-h" || d.Name != KwokName || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("deployment %s/%s, %d replicas, strategy %s; want fke-team-h/kwok, 1, Recreate", d.Namespace, d.Name, *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != "reg/fke/kwok:v0.8.0" || !slices.Equal(c.Command, []string{"/usr/local/bin/kwok", "--config=/etc/kwok/kwok.yaml"}) {
		t.Errorf("runs %s %v", c.Image, c.Command)
	}
	if c.SecurityContext == nil || !*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation || pod.SecurityContext == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("kwok runs with privileges the control-plane components do not have")
	}
	if *pod.AutomountServiceAccountToken {
		t.Error("kwok gets a token of the management cluster")
	}
	for _, p := range []string{c.StartupProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path} {
		if p != "/healthz" || c.ReadinessProbe.HTTPGet.Port.IntValue() != controlplane.KwokWorkloadPort {
			t.Errorf("probe %s on %v, want /healthz on %d", p, c.ReadinessProbe.HTTPGet.Port, controlplane.KwokWorkloadPort)
		}
	}
	vol := pod.Volumes[0].Secret
	if vol == nil || vol.SecretName != KwokName || len(vol.Items) != 2 || c.VolumeMounts[0].MountPath != controlplane.KwokWorkloadDir || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("files: volume %+v mounted %+v", pod.Volumes[0], c.VolumeMounts)
	}
	if d.Spec.Template.Annotations[AnnotationSecretHash] != "h1" {
		t.Error("a change of kwok's files does not roll it")
	}
}

// TestRunsOneVersion: a component's version is known while its pods all
// run the current template, ready or not, and unknown while an upgrade
// rolls or the Deployment's change is not yet observed.
func TestRunsOneVersion(t *testing.T) {
	for _, tc := range []struct {
		name                              string
		gen, observed                     int64
		replicas, updated, available, spc int32
		want                              bool
	}{
		{"created, one of two replicas available", 1, 1, 2, 2, 1, 2, true},
		{"created, none available yet", 1, 1, 2, 2, 0, 2, true},
		{"rolled out", 2, 2, 2, 2, 2, 2, true},
		{"upgrade rolling: old pods remain", 2, 2, 3, 1, 2, 2, false},
		{"upgrade not yet observed", 2, 1, 2, 2, 2, 2, false},
	} {
		d := &appsv1.Deployment{}
		d.Generation, d.Status.ObservedGeneration = tc.gen, tc.observed
		d.Spec.Replicas = &tc.spc
		d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas = tc.replicas, tc.updated, tc.available
		if got := runsOneVersion(d); got != tc.want {
			t.Errorf("%s: runsOneVersion = %v, want %v", tc.name, got, tc.want)
		}
	}
}
