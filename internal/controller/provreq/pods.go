package provreq

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/autoscaler/decide"
	provreqv1 "fke.dev/fke/internal/autoscaler/provreq/v1"
	"fke.dev/fke/internal/tenant"
)

// PodsFor builds the request's pods: Count copies of each PodSet's
// PodTemplate (looked up by name in templates, all in the request's
// namespace), named "<request>-<set>-<i>" so simulation messages can be
// traced to a PodSet. Each pod gets the tolerations the tenant's
// ExtendedResourceToleration admission plugin will give the real pods (see
// AddExtendedResourceTolerations): a PodTemplate is not a Pod, so the
// plugin never saw it. It fails when a template is missing.
func PodsFor(pr *provreqv1.ProvisioningRequest, templates map[string]*corev1.PodTemplate) ([]*corev1.Pod, error) {
	var pods []*corev1.Pod
	for s, set := range pr.Spec.PodSets {
		tmpl, ok := templates[set.PodTemplateRef.Name]
		if !ok || tmpl == nil {
			return nil, fmt.Errorf("PodTemplate %s/%s of podSet %d not found", pr.Namespace, set.PodTemplateRef.Name, s)
		}
		for i := range int(set.Count) {
			name := fmt.Sprintf("%s-%d-%d", pr.Name, s, i)
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Namespace:   pr.Namespace,
					Name:        name,
					UID:         types.UID(string(pr.UID) + "/" + name),
					Labels:      copyMap(tmpl.Template.Labels),
					Annotations: copyMap(tmpl.Template.Annotations),
				},
				Spec: *tmpl.Template.Spec.DeepCopy(),
			}
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[provreqv1.AnnotationConsumeProvisioningRequest] = pr.Name
			p.Annotations[provreqv1.AnnotationProvisioningClassName] = pr.Spec.ProvisioningClassName
			decide.AddExtendedResourceTolerations(&p.Spec)
			pods = append(pods, p)
		}
	}
	return pods, nil
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Booked returns the pods whose capacity is booked: for each request that
// is Provisioned and not final (its booking has not expired), its pods less
// as many as already consume it (unfinished pods whose consume annotation
// names it). template resolves a request's PodTemplates (nil when missing);
// a request whose pods cannot be built books nothing.
func Booked(prs []*provreqv1.ProvisioningRequest, template func(namespace, name string) *corev1.PodTemplate, pods []*corev1.Pod) []*corev1.Pod {
	var provisioned []*provreqv1.ProvisioningRequest
	for _, pr := range prs {
		if booking(pr) {
			provisioned = append(provisioned, pr)
		}
	}
	if len(provisioned) == 0 {
		return nil
	}
	consumed := map[types.NamespacedName]int{}
	for _, p := range pods {
		if name := p.Annotations[provreqv1.AnnotationConsumeProvisioningRequest]; name != "" &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			consumed[types.NamespacedName{Namespace: p.Namespace, Name: name}]++
		}
	}
	var out []*corev1.Pod
	for _, pr := range provisioned {
		templates := map[string]*corev1.PodTemplate{}
		for _, set := range pr.Spec.PodSets {
			if t := template(pr.Namespace, set.PodTemplateRef.Name); t != nil {
				templates[set.PodTemplateRef.Name] = t
			}
		}
		all, err := PodsFor(pr, templates)
		if err != nil {
			continue
		}
		if n := consumed[types.NamespacedName{Namespace: pr.Namespace, Name: pr.Name}]; n < len(all) {
			out = append(out, all[n:]...)
		}
	}
	return out
}

// booking reports whether pr's capacity is booked: provisioned, not final
// (its booking has not expired) and not being deleted.
func booking(pr *provreqv1.ProvisioningRequest) bool {
	return pr.DeletionTimestamp.IsZero() && !Final(pr) && meta.IsStatusConditionTrue(pr.Status.Conditions, provreqv1.Provisioned)
}

// BookedPods lists a tenant's ProvisioningRequests and returns the pods
// whose capacity is booked (see Booked); none when the CRD is not
// installed. The tenant's pods are only read when some capacity is booked.
func BookedPods(ctx context.Context, t *tenant.Tenant) ([]*corev1.Pod, error) {
	var list provreqv1.ProvisioningRequestList
	if err := t.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing provisioning requests: %w", err)
	}
	var prs []*provreqv1.ProvisioningRequest
	for i := range list.Items {
		if booking(&list.Items[i]) {
			prs = append(prs, &list.Items[i])
		}
	}
	if len(prs) == 0 {
		return nil, nil
	}
	pods, err := t.Pods(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	return bookedIn(ctx, t, prs, pods)
}

// bookedIn is Booked with the PodTemplates read from the tenant.
func bookedIn(ctx context.Context, t *tenant.Tenant, prs []*provreqv1.ProvisioningRequest, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	var getErr error
	booked := Booked(prs, func(ns, name string) *corev1.PodTemplate {
		pt, err := podTemplate(ctx, t, ns, name)
		if err != nil && !apierrors.IsNotFound(err) && getErr == nil {
			getErr = err
		}
		return pt
	}, pods)
	return booked, getErr
}

// podTemplate reads a PodTemplate from the tenant's cache.
func podTemplate(ctx context.Context, t *tenant.Tenant, ns, name string) (*corev1.PodTemplate, error) {
	pt := &corev1.PodTemplate{}
	if err := t.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pt); err != nil {
		return nil, fmt.Errorf("reading PodTemplate %s/%s: %w", ns, name, err)
	}
	return pt, nil
}
