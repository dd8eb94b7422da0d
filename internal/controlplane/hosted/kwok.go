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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/image"
)

// KwokName names the Deployment and the Secret of a hosted cluster's kwok.
const KwokName = "kwok"

var _ controlplane.KwokWorkloads = (*Runtime)(nil)

// RunKwok runs the kwok of the cluster with key as a Deployment of one
// replica in the cluster's namespace, its files in a Secret (see
// controlplane.KwokWorkloads). A change of the files rolls it.
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
	return r.apply(ctx, secret, kwokDeployment(ns, r.imageRef(image.Kwok), args, hashData(files), slices.Sorted(maps.Keys(files))))
}

// kwokDeployment renders kwok's Deployment: files from the Secret under
// controlplane.KwokWorkloadDir, /healthz on controlplane.KwokWorkloadPort for its probes. One
// replica, replaced (never two kwoks playing the same nodes).
func kwokDeployment(ns, img string, args []string, hash string, keys []string) *appsv1.Deployment {
	return workload{
		name: KwokName, labels: componentLabels(KwokName), image: img, command: image.Kwok.Path, args: args,
		port: corev1.ContainerPort{Name: "kubelet", ContainerPort: controlplane.KwokWorkloadPort}, mountDir: controlplane.KwokWorkloadDir,
		// kwok keeps its own files under $HOME/.kwok.
		env:    []corev1.EnvVar{{Name: "HOME", Value: "/tmp"}},
		health: &corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(controlplane.KwokWorkloadPort)}},
		hash:   hash, keys: keys,
	}.deployment(ns)
}

// StopKwok removes the kwok Deployment and Secret of the cluster with key.
func (r *Runtime) StopKwok(ctx context.Context, key string) error {
	ns := Namespace(key)
	defer r.applied.forgetNamespace(ns)
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
