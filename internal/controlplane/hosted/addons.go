package hosted

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/image"
)

// LabelAddon names the addon process (controlplane.Addon.Name) of the
// Deployment, Secret, Service and pods the runtime makes for it.
const LabelAddon = "fke.dev/addon"

// addonDir is where an addon's files are mounted in its pods.
const addonDir = "/etc/fke/addon"

// addonNetwork is where the runtime runs the addon processes of the plane
// in namespace ns: each in pods of its own that listen on every address,
// behind a Service named after it, and reaching the API server through its
// Service.
func addonNetwork(ns string) controlplane.AddonNetwork {
	return controlplane.AddonNetwork{
		APIServer:     "https://" + APIServerService + "." + ns + ".svc:" + strconv.Itoa(APIServerServicePort),
		BindAddress:   "0.0.0.0",
		ServiceDomain: ns + ".svc",
	}
}

// EnsureAddons runs each addon process in a Deployment of one replica in
// the tenant's namespace, named after it, with its files in a Secret of
// the same name and, when the API server calls it (Addon.Port), a Service
// of that name: the API server, a pod of the same management cluster,
// reaches it at <name>.<namespace>.svc (AddonNetwork.Host). A change of an
// addon's files, arguments or image replaces its pod; addons not asked for
// are deleted.
func (r *Runtime) EnsureAddons(ctx context.Context, key string, addons []controlplane.Addon) (controlplane.Status, error) {
	ns := Namespace(key)
	if err := r.c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); err != nil {
		return controlplane.Status{}, fmt.Errorf("addons of %s: namespace %s: %w", key, ns, err)
	}
	net := addonNetwork(ns)
	want := map[string]bool{}
	var errs []error
	for _, a := range addons {
		want[a.Name] = true
		objs, err := r.addonObjects(ns, net, a)
		if err == nil {
			err = r.apply(ctx, objs...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("addon %s of %s: %w", a.Name, key, err))
		}
	}
	running, err := r.addonDeployments(ctx, ns)
	if err != nil {
		errs = append(errs, err)
	}
	for _, d := range running {
		name := d.Labels[LabelAddon]
		if want[name] {
			continue
		}
		if err := r.removeAddon(ctx, ns, name); err != nil {
			errs = append(errs, fmt.Errorf("removing addon %s of %s: %w", name, key, err))
			continue
		}
		r.log.Info("removed addon", "cluster", key, "addon", name)
	}
	st, err := r.Status(ctx, key)
	return st, errors.Join(append(errs, err)...)
}

// addonObjects renders the Secret, the Deployment and (for an addon the
// API server calls) the Service of a in namespace ns.
func (r *Runtime) addonObjects(ns string, net controlplane.AddonNetwork, a controlplane.Addon) ([]client.Object, error) {
	si, ok := image.Addon(a.Binary)
	if !ok {
		return nil, fmt.Errorf("the hosted runtime has no image of %s", a.Binary)
	}
	for f := range a.Files {
		if f != path.Base(f) {
			return nil, fmt.Errorf("file name %q is not a base name", f)
		}
	}
	health, err := addonHealth(a)
	if err != nil {
		return nil, err
	}
	args := a.ExpandArgs(addonDir, net.BindAddress)
	img := r.imageRef(si)
	labels := map[string]string{LabelAddon: a.Name}
	// The pod is replaced when what it runs changes, not only its files
	// (keys that no file name holds).
	hashed := map[string][]byte{"\x00image": []byte(img), "\x00args": []byte(strings.Join(args, "\x00"))}
	maps.Copy(hashed, a.Files)
	hash := hashData(hashed)
	w := workload{
		name: a.Name, labels: labels, image: img, command: si.Path, args: args,
		port: corev1.ContainerPort{Name: "https", ContainerPort: a.Port}, mountDir: addonDir,
		health: health, hash: hash, keys: slices.Sorted(maps.Keys(a.Files)),
	}
	objs := []client.Object{
		&corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: meta(a.Name, ns, labels),
			Type:       corev1.SecretTypeOpaque,
			Data:       a.Files,
		},
		w.deployment(ns),
	}
	if a.Port != 0 {
		objs = append(objs, &corev1.Service{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: meta(a.Name, ns, labels),
			Spec: corev1.ServiceSpec{
				Selector: labels,
				Ports: []corev1.ServicePort{{
					Name: "https", Protocol: corev1.ProtocolTCP, Port: a.Port, TargetPort: intstr.FromInt32(a.Port),
				}},
			},
		})
	}
	return objs, nil
}

// addonHealth is the probe of a's pods: a GET of HealthURL's path on its
// port (scheme as the URL's); a TCP connect to that port when the check
// needs a client certificate, which the kubelet does not present; none
// without a HealthURL.
func addonHealth(a controlplane.Addon) (*corev1.ProbeHandler, error) {
	if a.HealthURL == "" {
		return nil, nil
	}
	u, err := url.Parse(a.HealthURL)
	if err != nil {
		return nil, fmt.Errorf("health URL %q: %w", a.HealthURL, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return nil, fmt.Errorf("health URL %q has no port", a.HealthURL)
	}
	if len(a.HealthClientCert) > 0 {
		return &corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(port)}}, nil
	}
	scheme := corev1.URISchemeHTTP
	if u.Scheme == "https" {
		scheme = corev1.URISchemeHTTPS
	}
	return &corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: u.Path, Port: intstr.FromInt(port), Scheme: scheme}}, nil
}

// addonDeployments lists the addon Deployments of namespace ns.
func (r *Runtime) addonDeployments(ctx context.Context, ns string) ([]appsv1.Deployment, error) {
	var ds appsv1.DeploymentList
	if err := r.c.List(ctx, &ds, client.InNamespace(ns), client.HasLabels{LabelAddon}); err != nil {
		return nil, fmt.Errorf("listing the addons of %s: %w", ns, err)
	}
	return ds.Items, nil
}

// removeAddon deletes the Deployment, Secret and Service of addon name.
func (r *Runtime) removeAddon(ctx context.Context, ns, name string) error {
	defer r.applied.forgetNamespace(ns)
	for _, o := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
	} {
		if err := r.c.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %T %s/%s: %w", o, ns, name, err)
		}
	}
	return nil
}

// addonStatus reports the addon Deployments of ns, by name: running with
// a replica, ready with an available one, and the restarts of their pods'
// containers.
func addonStatus(ds []appsv1.Deployment, pods []corev1.Pod) []controlplane.ComponentStatus {
	restarts := map[string]int{}
	for _, p := range pods {
		if name := p.Labels[LabelAddon]; name != "" {
			for _, c := range p.Status.ContainerStatuses {
				restarts[name] += int(c.RestartCount)
			}
		}
	}
	var out []controlplane.ComponentStatus
	for _, d := range ds {
		name := d.Labels[LabelAddon]
		out = append(out, controlplane.ComponentStatus{
			Name: name, Running: d.Status.Replicas > 0, Ready: d.Status.AvailableReplicas > 0, Restarts: restarts[name],
			Log: "kubectl -n " + d.Namespace + " logs deployment/" + d.Name + " in the management cluster",
		})
	}
	slices.SortFunc(out, func(a, b controlplane.ComponentStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}
