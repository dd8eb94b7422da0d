package deploy

import (
	"path/filepath"
	"testing"
)

// TestRenderModelServingExample renders the example's overlays: dev is one
// CPU-only replica without an HPA, prod asks for a GPU per replica on the
// GPU pool and keeps the HPA (the object lists say which).
func TestRenderModelServingExample(t *testing.T) {
	root := filepath.Join("..", "..", "examples", "model-serving", "overlays")
	for _, tc := range []struct {
		overlay, want string
		gpu           bool
	}{
		{"dev", "Namespace/model-serving-dev,model-serving-dev/Deployment/model-server,model-serving-dev/Service/model-server,model-serving-dev/PodDisruptionBudget/model-server", false},
		{"prod", "Namespace/model-serving,model-serving/Deployment/model-server,model-serving/Service/model-server,model-serving/HorizontalPodAutoscaler/model-server,model-serving/PodDisruptionBudget/model-server", true},
	} {
		r, err := Render(Source{Path: filepath.Join(root, tc.overlay)})
		if err != nil {
			t.Fatalf("%s: %v", tc.overlay, err)
		}
		if r.Kind != SourceKustomize {
			t.Errorf("%s: kind %s", tc.overlay, r.Kind)
		}
		if got := names(r); got != tc.want {
			t.Errorf("%s: objects\n%s\nwant\n%s", tc.overlay, got, tc.want)
		}
		for _, o := range r.Objects {
			if o.GetKind() != "Deployment" {
				continue
			}
			c := o.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			_, gpu := c["resources"].(map[string]any)["requests"].(map[string]any)["nvidia.com/gpu"]
			if gpu != tc.gpu {
				t.Errorf("%s: asks for a GPU: %v", tc.overlay, gpu)
			}
		}
	}
}
