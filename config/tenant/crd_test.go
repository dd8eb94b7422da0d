package tenantcrd

import "testing"

func TestProvisioningRequest(t *testing.T) {
	crd, err := ProvisioningRequest()
	if err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Group != "autoscaling.x-k8s.io" || crd.Spec.Names.Kind != "ProvisioningRequest" {
		t.Fatalf("group/kind = %s/%s", crd.Spec.Group, crd.Spec.Names.Kind)
	}
	storage := ""
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			storage = v.Name
		}
		if v.Subresources == nil || v.Subresources.Status == nil {
			t.Errorf("version %s has no status subresource", v.Name)
		}
	}
	if storage != "v1" {
		t.Errorf("storage version = %q, want v1", storage)
	}
	if crd.Annotations[AnnotationHash] == "" {
		t.Error("no manifest hash annotation")
	}
}
