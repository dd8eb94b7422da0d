package hosted

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fke.dev/fke/internal/controlplane"
)

// TestAddonObjects: an addon the API server calls runs in a Deployment of
// its own, with its files from a Secret, listening on every address of
// its pod at its port, probed at its health URL's path, behind a Service
// of its name; a change of its arguments replaces the pod.
func TestAddonObjects(t *testing.T) {
	r := &Runtime{opts: Options{Registry: "registry.test/fke"}}
	ns := "fke-default-demo"
	net := addonNetwork(ns)
	a := controlplane.Addon{
		Name: "metrics-server", Binary: "metrics-server", Port: 10250,
		Files: map[string][]byte{"tls.crt": []byte("cert"), "kubeconfig": []byte("kc")},
		Args: []string{"--bind-address=" + controlplane.AddonBindVar, "--secure-port=10250",
			"--tls-cert-file=" + controlplane.AddonDirVar + "/tls.crt"},
		HealthURL: "https://127.0.0.1:10250/livez",
	}
	objs, err := r.addonObjects(ns, net, a)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 3 {
		t.Fatalf("%d objects, want a Secret, a Deployment and a Service", len(objs))
	}
	secret, d, svc := objs[0].(*corev1.Secret), objs[1].(*appsv1.Deployment), objs[2].(*corev1.Service)
	if secret.Name != a.Name || string(secret.Data["tls.crt"]) != "cert" {
		t.Errorf("secret %s %v", secret.Name, secret.Data)
	}
	if d.Name != a.Name || d.Labels[LabelAddon] != a.Name || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("deployment %s labels %v replicas %d strategy %s", d.Name, d.Labels, *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != "registry.test/fke/metrics-server:v0.8.0" {
		t.Errorf("image %s", c.Image)
	}
	wantCmd := []string{"/usr/local/bin/metrics-server", "--bind-address=0.0.0.0", "--secure-port=10250", "--tls-cert-file=" + addonDir + "/tls.crt"}
	if !slices.Equal(c.Command, wantCmd) {
		t.Errorf("command %q, want %q", c.Command, wantCmd)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 10250 {
		t.Errorf("ports %+v", c.Ports)
	}
	if g := c.ReadinessProbe.HTTPGet; g == nil || g.Path != "/livez" || g.Port.IntValue() != 10250 || g.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("readiness probe %+v", c.ReadinessProbe)
	}
	if src := pod.Volumes[0].Secret; src == nil || src.SecretName != a.Name || len(src.Items) != 2 {
		t.Errorf("files volume %+v", pod.Volumes[0])
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the addon's pod gets a token of the management cluster")
	}
	if svc.Name != a.Name || svc.Spec.Selector[LabelAddon] != a.Name || svc.Spec.Ports[0].Port != 10250 || svc.Spec.Ports[0].TargetPort.IntValue() != 10250 {
		t.Errorf("service %s %+v", svc.Name, svc.Spec)
	}
	// The API server reaches it at the Service's name.
	if h := net.Host(a.Name); h != "metrics-server."+ns+".svc" {
		t.Errorf("host %s", h)
	}

	changed := a
	changed.Args = append(slices.Clone(a.Args), "--metric-resolution=30s")
	objs2, err := r.addonObjects(ns, net, changed)
	if err != nil {
		t.Fatal(err)
	}
	if h1, h2 := d.Spec.Template.Annotations[AnnotationSecretHash], objs2[1].(*appsv1.Deployment).Spec.Template.Annotations[AnnotationSecretHash]; h1 == h2 {
		t.Error("changed arguments do not replace the pod")
	}
}

func TestAddonObjectsRefused(t *testing.T) {
	r := &Runtime{opts: Options{Registry: "registry.test/fke"}}
	net := addonNetwork("fke-default-demo")
	for name, tc := range map[string]struct {
		a    controlplane.Addon
		want string
	}{
		"no image of its binary":       {controlplane.Addon{Name: "x", Binary: "no-such-binary"}, "no image of no-such-binary"},
		"a file outside its directory": {controlplane.Addon{Name: "x", Binary: "metrics-server", Files: map[string][]byte{"../x": nil}}, "not a base name"},
		"a health URL without a port":  {controlplane.Addon{Name: "x", Binary: "metrics-server", HealthURL: "https://127.0.0.1/livez"}, "has no port"},
	} {
		if _, err := r.addonObjects("fke-default-demo", net, tc.a); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}

func TestAddonHealth(t *testing.T) {
	h, err := addonHealth(controlplane.Addon{HealthURL: "https://127.0.0.1:8000/healthz", HealthClientCert: []byte("cert")})
	if err != nil || h.TCPSocket == nil || h.TCPSocket.Port.IntValue() != 8000 {
		t.Errorf("a check with a client certificate: %+v, %v; want a TCP probe of 8000", h, err)
	}
	if h, err := addonHealth(controlplane.Addon{}); h != nil || err != nil {
		t.Errorf("no health URL: %+v, %v; want no probe", h, err)
	}
}

func TestAddonStatus(t *testing.T) {
	dep := func(name string, replicas, available int32) appsv1.Deployment {
		return appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "fke-default-demo", Name: name, Labels: map[string]string{LabelAddon: name}},
			Status:     appsv1.DeploymentStatus{Replicas: replicas, AvailableReplicas: available},
		}
	}
	pod := func(addon string, restarts int32) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelAddon: addon}},
			Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{RestartCount: restarts}}},
		}
	}
	got := addonStatus(
		[]appsv1.Deployment{dep("metrics-server", 1, 1), dep("gpu-metrics", 1, 0), dep("stopped", 0, 0)},
		[]corev1.Pod{pod("gpu-metrics", 3), pod("metrics-server", 0), {ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelComponent: "etcd"}}}},
	)
	log := func(name string) string {
		return "kubectl -n fke-default-demo logs deployment/" + name + " in the management cluster"
	}
	want := []controlplane.ComponentStatus{
		{Name: "gpu-metrics", Running: true, Restarts: 3, Log: log("gpu-metrics")},
		{Name: "metrics-server", Running: true, Ready: true, Log: log("metrics-server")},
		{Name: "stopped", Log: log("stopped")},
	}
	if !slices.Equal(got, want) {
		t.Errorf("addonStatus = %+v, want %+v", got, want)
	}
}
