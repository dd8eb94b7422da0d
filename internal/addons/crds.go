// Package addons installs what fke adds to every tenant cluster beyond the
// control plane: CRDs of the APIs fke serves there (ProvisioningRequest) and,
// later, manifests of tenant addons.
package addons

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	tenantcrd "fke.dev/fke/config/tenant"
)

// EstablishTimeout bounds how long EnsureProvisioningRequestAPI waits for the
// CRD to be served.
const EstablishTimeout = time.Minute

// EnsureProvisioningRequestAPI creates or updates the ProvisioningRequest CRD
// (autoscaling.x-k8s.io) in the tenant cluster at cfg and waits until it is
// Established. Idempotent; when the CRD of the embedded manifest is already
// established it costs one GET.
func EnsureProvisioningRequestAPI(ctx context.Context, cfg *rest.Config) error {
	want, err := tenantcrd.ProvisioningRequest()
	if err != nil {
		return err
	}
	cs, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	return EnsureCRD(ctx, cs, want)
}

// EnsureCRD creates want, or updates it when its AnnotationHash differs, and
// waits until it is Established. Idempotent; one GET when nothing changed.
func EnsureCRD(ctx context.Context, cs apiextclient.Interface, want *apiextensionsv1.CustomResourceDefinition) error {
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	hash := want.Annotations[tenantcrd.AnnotationHash]
	got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := api.Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", want.Name, err)
		}
	case err != nil:
		return fmt.Errorf("getting CRD %s: %w", want.Name, err)
	case got.Annotations[tenantcrd.AnnotationHash] == hash && established(got):
		return nil
	case got.Annotations[tenantcrd.AnnotationHash] != hash:
		got.Spec = want.Spec
		if got.Annotations == nil {
			got.Annotations = map[string]string{}
		}
		for k, v := range want.Annotations {
			got.Annotations[k] = v
		}
		if _, err := api.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating CRD %s: %w", want.Name, err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, EstablishTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried until the deadline
		}
		return established(got), nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not established: %w", want.Name, err)
	}
	return nil
}

func established(c *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
