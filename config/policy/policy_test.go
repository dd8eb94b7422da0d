package policy

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestAllDecodesEveryPolicyWithItsBinding(t *testing.T) {
	objs, err := All()
	if err != nil {
		t.Fatal(err)
	}
	policies, bindings := map[string]bool{}, map[string]string{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy":
			policies[o.GetName()] = true
		case "ValidatingAdmissionPolicyBinding":
			name, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
			bindings[o.GetName()] = name
		default:
			t.Fatalf("unexpected kind %s", o.GetKind())
		}
	}
	if len(policies) == 0 {
		t.Fatal("no policies embedded")
	}
	for p := range policies {
		found := false
		for _, target := range bindings {
			found = found || target == p
		}
		if !found {
			t.Errorf("policy %s has no binding: it would never be enforced", p)
		}
	}
}
