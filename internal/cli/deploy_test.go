package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fke.dev/fke/internal/deploy/sourcetest"
)

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

// TestDeployStaysInTree runs `fke deploy -f` on sources that reach out of
// their tree (a manifest linked out, a kustomization's base above its work
// tree or patch linked out, a chart's template linked out) and wants each
// refused before any connection, naming the field and saying nothing was
// applied; the kubeconfig given names no server that could answer.
func TestDeployStaysInTree(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.yaml")
	if err := os.WriteFile(secret, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stolen\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	files := map[string]string{
		".git/HEAD":                       "ref: refs/heads/main\n",
		"manifests/leak.yaml":             "->" + secret,
		"kust/kustomization.yaml":         "resources:\n- ../../" + filepath.Base(outside) + "\n",
		"patch/kustomization.yaml":        "resources:\n- cm.yaml\npatches:\n- path: p.yaml\n",
		"patch/cm.yaml":                   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n",
		"patch/p.yaml":                    "->" + secret,
		"chart/Chart.yaml":                "apiVersion: v2\nname: app\nversion: 0.1.0\n",
		"chart/templates/kubeconfig.yaml": "->" + secret,
	}
	sourcetest.WriteTree(t, repo, files)
	for dir, want := range map[string]string{
		"manifests": `manifests/leak.yaml: "manifests/leak.yaml" is, or passes through, a symbolic link that leaves the source tree`,
		"kust":      `kust/kustomization.yaml: resources[0]: "../../` + filepath.Base(outside) + `" goes above the root of the source`,
		"patch":     `patch/kustomization.yaml: patches[0].path: "p.yaml" is, or passes through, a symbolic link`,
		"chart":     `chart chart: "templates/kubeconfig.yaml" is, or passes through, a symbolic link`,
	} {
		root := NewRoot()
		var out strings.Builder
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs([]string{"deploy", "-f", filepath.Join(repo, dir), "--kubeconfig", filepath.Join(repo, "no-such-kubeconfig")})
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nothing was applied") {
			t.Errorf("fke deploy -f %s: %v, want %q and nothing applied", dir, err, want)
		}
	}
}
