package cli

import "testing"

func TestReleaseName(t *testing.T) {
	tests := map[string]string{
		"app/":                    "app",
		"deploy/app.yaml":         "app",
		"overlays/Prod_EU":        "prod-eu",
		"charts/inference-server": "inference-server",
		"___":                     "app",
	}
	for path, want := range tests {
		if got := releaseName(path); got != want {
			t.Errorf("releaseName(%q) = %q, want %q", path, got, want)
		}
	}
}
