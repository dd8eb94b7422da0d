package hosted

import (
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/nodeprovider/kwok"
)

// KwokName names the Deployment and the Secret of a hosted cluster's kwok.
const KwokName = "kwok"

var _ kwok.Workloads = (*Runtime)(nil)

// RunKwok runs the kwok of the cluster with key as a Deployment of one
// replica in the cluster's namespace, its files in a Secret (see
// kwok.Workloads). A change of the files rolls it.
func (r *Runtime) RunKwok(ctx context.Context, key string, files map[string][]byte, args []string) error {
	ns := Namespace(key)
	if err := r.c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); err != nil {
		return fmt.Errorf("namespace %s of %s: %w", ns, key, err)
	}
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: meta(KwokName, ns, componentLabels(KwokName)),
		Data:       files,
	}
	return r.apply(ctx, secret, kwokDeployment(ns, r.opts.Registry+"/"+image.Kwok.Binary+":"+image.KwokVersion, args, hashData(files), slices.Sorted(maps.Keys(files))))
}

// kwokDeployment renders kwok's Deployment: files from the Secret under
// kwok.WorkloadDir, /healthz on kwok.WorkloadPort for its probes. One
// replica, replaced (never two kwoks playing the same nodes).
func kwokDeployment(ns, img string, args []string, hash string, keys []string) *appsv1.Deployment {
	labels := componentLabels(KwokName)
	items := make([]corev1.KeyToPath, 0, len(keys))
	for _, k := range keys {
		items = append(items, corev1.KeyToPath{Key: k, Path: k})
	}
	health := func(kind probeKind) *corev1.Probe {
		return probe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(kwok.WorkloadPort)}}, kind)
	}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta(KwokName, ns, labels),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{AnnotationSecretHash: hash}},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					SecurityContext:               podSecurity(),
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Volumes: []corev1.Volume{{Name: "files", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
						SecretName: KwokName, Items: items, DefaultMode: ptr.To[int32](0o440),
					}}}, {Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
					Containers: []corev1.Container{{
						Name:    KwokName,
						Image:   img,
						Command: append([]string{image.Kwok.Path}, args...),
						Ports:   []corev1.ContainerPort{{Name: "kubelet", ContainerPort: kwok.WorkloadPort}},
						// kwok keeps its own files under $HOME/.kwok.
						Env:             []corev1.EnvVar{{Name: "GOGC", Value: "50"}, {Name: "HOME", Value: "/tmp"}},
						Resources:       requests("50m", "64Mi"),
						SecurityContext: containerSecurity(),
						VolumeMounts: []corev1.VolumeMount{
							{Name: "files", MountPath: kwok.WorkloadDir, ReadOnly: true},
							{Name: "tmp", MountPath: "/tmp"},
						},
						StartupProbe:   health(startup),
						LivenessProbe:  health(liveness),
						ReadinessProbe: health(readinessReport),
					}},
				},
			},
		},
	}
	return d
}

// StopKwok removes the kwok Deployment and Secret of the cluster with key.
func (r *Runtime) StopKwok(ctx context.Context, key string) error {
	ns := Namespace(key)
	for _, o := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: KwokName}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: KwokName}},
	} {
		if err := r.c.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s/%s: %w", ns, o.GetName(), err)
		}
	}
	return nil
}
