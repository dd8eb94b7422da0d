package addons

import (
	"context"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	tenantcrd "fke.dev/fke/config/tenant"
)

// establishOnWrite makes the fake API server mark written CRDs Established.
func establishOnWrite(cs *fake.Clientset) {
	mark := func(a clienttesting.Action) (bool, runtime.Object, error) {
		var obj runtime.Object
		switch a := a.(type) {
		case clienttesting.CreateAction:
			obj = a.GetObject()
		case clienttesting.UpdateAction:
			obj = a.GetObject()
		}
		crd := obj.(*apiextensionsv1.CustomResourceDefinition)
		crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
		return false, nil, nil // let the tracker store it
	}
	cs.PrependReactor("create", "customresourcedefinitions", mark)
	cs.PrependReactor("update", "customresourcedefinitions", mark)
}

func countVerbs(cs *fake.Clientset) map[string]int {
	n := map[string]int{}
	for _, a := range cs.Actions() {
		n[a.GetVerb()]++
	}
	return n
}

func TestEnsureCRD(t *testing.T) {
	ctx := context.Background()
	want, err := tenantcrd.ProvisioningRequest()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("creates, then is a single GET", func(t *testing.T) {
		cs := fake.NewClientset()
		establishOnWrite(cs)
		if err := EnsureCRD(ctx, cs, want.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		if n := countVerbs(cs); n["create"] != 1 || n["update"] != 0 {
			t.Fatalf("first call: %v, want one create", n)
		}
		cs.ClearActions()
		if err := EnsureCRD(ctx, cs, want.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		if n := countVerbs(cs); n["get"] != 1 || len(cs.Actions()) != 1 {
			t.Fatalf("second call: %v, want one get", n)
		}
	})

	t.Run("updates an outdated CRD", func(t *testing.T) {
		old := want.DeepCopy()
		old.Annotations = map[string]string{tenantcrd.AnnotationHash: "old", "keep": "me"}
		old.Spec.Versions = old.Spec.Versions[:1]
		old.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
		cs := fake.NewClientset(old)
		establishOnWrite(cs)
		if err := EnsureCRD(ctx, cs, want.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		got, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Spec.Versions) != len(want.Spec.Versions) || got.Annotations[tenantcrd.AnnotationHash] != want.Annotations[tenantcrd.AnnotationHash] || got.Annotations["keep"] != "me" {
			t.Fatalf("not updated: versions %d, annotations %v", len(got.Spec.Versions), got.Annotations)
		}
	})
}
