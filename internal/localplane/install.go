package localplane

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
	"k8s.io/client-go/tools/clientcmd"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/config/crd"
	"fke.dev/fke/internal/catalog"
)

// installAPI creates or updates the fke.dev CRDs and waits until they are served.
func installAPI(ctx context.Context, kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	cs, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds, err := crd.All()
	if err != nil {
		return err
	}
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	for _, want := range crds {
		got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if _, err := api.Create(ctx, want, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating CRD %s: %w", want.Name, err)
			}
		case err != nil:
			return fmt.Errorf("getting CRD %s: %w", want.Name, err)
		default:
			got.Spec = want.Spec
			if _, err := api.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating CRD %s: %w", want.Name, err)
			}
		}
	}
	for _, want := range crds {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // retried until the deadline
			}
			return established(got), nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", want.Name, err)
		}
	}
	return installCatalog(ctx, cfg)
}

// installCatalog creates the default instance types that are missing; it
// never overwrites an operator's edits.
func installCatalog(ctx context.Context, cfg *rest.Config) error {
	scheme := runtime.NewScheme()
	if err := fkev1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	for _, it := range catalog.Default() {
		if err := c.Create(ctx, &it); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating instance type %s: %w", it.Name, err)
		}
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
