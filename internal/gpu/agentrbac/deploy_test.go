package agentrbac

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestRBACManifest(t *testing.T) {
	var kinds []string
	for _, doc := range bytes.Split(RBAC, []byte("\n---\n")) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("parsing %q: %v", doc, err)
		}
		kinds = append(kinds, u.GetKind())
		if u.GetKind() == "ValidatingAdmissionPolicy" {
			exprs, _, _ := unstructured.NestedSlice(u.Object, "spec", "validations")
			found := false
			for _, e := range exprs {
				if strings.Contains(e.(map[string]any)["expression"].(string), "request.userInfo.extra['authentication.kubernetes.io/node-name']") {
					found = true
				}
			}
			if !found {
				t.Error("policy does not check the node-name extra")
			}
		}
	}
	want := "ServiceAccount ClusterRole ClusterRoleBinding ValidatingAdmissionPolicy ValidatingAdmissionPolicyBinding"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("kinds %s, want %s", got, want)
	}
}
