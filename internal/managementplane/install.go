package managementplane

import (
	"context"
	"fmt"

	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/config/crd"
	"fke.dev/fke/config/policy"
	"fke.dev/fke/internal/addons"
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
	for _, want := range crds {
		if err := addons.EnsureCRD(ctx, cs, want); err != nil {
			return err
		}
	}
	if err := installPolicies(ctx, cfg); err != nil {
		return err
	}
	return installCatalog(ctx, cfg)
}

// installPolicies applies the fke.dev admission policies (server-side
// apply: a changed policy replaces the installed one).
func installPolicies(ctx context.Context, cfg *rest.Config) error {
	objs, err := policy.All()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := c.Patch(ctx, o, client.Apply, client.FieldOwner("fke"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
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
