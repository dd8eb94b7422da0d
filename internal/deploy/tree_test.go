package deploy

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"fke.dev/fke/internal/deploy/sourcetest"
)

// stolen is a valid manifest and values file outside every tree the tests
// render: a path that reached it would render without error.
const stolen = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stolen\ndata:\n  replicas: \"9\"\nreplicas: 9\n"

const chartYAML = "apiVersion: v2\nname: app\nversion: 0.1.0\n"

const chartTemplate = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  replicas: \"{{ .Values.replicas }}\"\n"

// TestRenderStaysInTree renders sources that name paths out of their tree
// in each way a source can (the path itself, values files, a
// kustomization's fields, a chart's and a manifest directory's links) and
// wants each refused with a PathError naming the field, the outside file
// never read; and sources whose links stay inside the tree rendered.
func TestRenderStaysInTree(t *testing.T) {
	outside := t.TempDir()
	sourcetest.WriteTree(t, outside, map[string]string{"secret.yaml": stolen, "base/kustomization.yaml": "resources:\n- ../secret.yaml\n"})
	secret := filepath.Join(outside, "secret.yaml")

	tests := []struct {
		name  string
		files map[string]string
		src   Source
		// field and reason the PathError must have; "" for a render that
		// must succeed.
		field, reason string
	}{
		{name: "path above the root", src: Source{Path: "../secret.yaml"}, field: "path", reason: leavesParent},
		{name: "absolute path", src: Source{Path: secret}, field: "path", reason: leavesAbsolute},
		{name: "path through a link out of the tree", files: map[string]string{"app": "->" + outside}, src: Source{Path: "app/secret.yaml"}, field: "path", reason: leavesLink},
		{name: "manifest directory with a link out", files: map[string]string{"app/ok.yaml": stolen, "app/leak.yaml": "->" + secret}, src: Source{Path: "app"}, field: "app/leak.yaml", reason: leavesLink},
		{name: "manifest directory with a link inside", files: map[string]string{"app/cm.yaml": "->../shared/cm.yaml", "shared/cm.yaml": stolen}, src: Source{Path: "app"}},

		{name: "values file above the root", files: map[string]string{"chart/Chart.yaml": chartYAML, "chart/templates/cm.yaml": chartTemplate},
			src: Source{Path: "chart", ValuesFiles: []string{"../../../secret.yaml"}}, field: "valuesFiles[0]", reason: leavesParent},
		{name: "absolute values file", files: map[string]string{"chart/Chart.yaml": chartYAML, "chart/templates/cm.yaml": chartTemplate, "chart/values.yaml": "replicas: 1\n"},
			src: Source{Path: "chart", ValuesFiles: []string{"chart/values.yaml", secret}}, field: "valuesFiles[1]", reason: leavesAbsolute},
		{name: "values file linked out", files: map[string]string{"chart/Chart.yaml": chartYAML, "chart/templates/cm.yaml": chartTemplate, "prod.yaml": "->" + secret},
			src: Source{Path: "chart", ValuesFiles: []string{"prod.yaml"}}, field: "valuesFiles[0]", reason: leavesLink},
		{name: "values file in the tree", files: map[string]string{"chart/Chart.yaml": chartYAML, "chart/templates/cm.yaml": chartTemplate, "env/prod.yaml": "replicas: 3\n"},
			src: Source{Path: "chart", ValuesFiles: []string{"env/prod.yaml"}}},

		{name: "chart template linked out", files: map[string]string{"chart/Chart.yaml": chartYAML, "chart/templates/cm.yaml": chartTemplate, "chart/templates/leak.yaml": "->" + secret},
			src: Source{Path: "chart"}, field: "chart chart", reason: leavesLink},
		{name: "chart file linked out, read by .Files.Get", files: map[string]string{"chart/Chart.yaml": chartYAML, "chart/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: f\ndata:\n  k: {{ .Files.Get \"files/k\" | quote }}\n", "chart/files/k": "->" + secret},
			src: Source{Path: "chart"}, field: "chart chart", reason: leavesLink},
		{name: "chart directory linked out", files: map[string]string{"chart/Chart.yaml": chartYAML, "chart/templates/cm.yaml": chartTemplate, "chart/files": "->" + outside},
			src: Source{Path: "chart"}, field: "chart chart", reason: leavesLink},
		{name: "chart with a link to a shared directory in the tree", files: map[string]string{"chart/Chart.yaml": chartYAML, "chart/templates": "->../shared", "shared/cm.yaml": chartTemplate, "chart/values.yaml": "replicas: 1\n"},
			src: Source{Path: "chart"}},

		{name: "kustomization resource above the root", files: map[string]string{"app/kustomization.yaml": "resources:\n- ../../secret.yaml\n"},
			src: Source{Path: "app"}, field: "app/kustomization.yaml: resources[0]", reason: leavesParent},
		{name: "kustomization base above the root", files: map[string]string{"app/kustomization.yaml": "resources:\n- ../../base\n"},
			src: Source{Path: "app"}, field: "app/kustomization.yaml: resources[0]", reason: leavesParent},
		{name: "kustomization absolute resource", files: map[string]string{"app/kustomization.yaml": "resources:\n- " + secret + "\n"},
			src: Source{Path: "app"}, field: "app/kustomization.yaml: resources[0]", reason: leavesAbsolute},
		{name: "kustomization resource linked out", files: map[string]string{"app/kustomization.yaml": "resources:\n- cm.yaml\n", "app/cm.yaml": "->" + secret},
			src: Source{Path: "app"}, field: "app/kustomization.yaml: resources[0]", reason: leavesLink},
		{name: "kustomization base linked out", files: map[string]string{"app/kustomization.yaml": "resources:\n- base\n", "app/base": "->" + filepath.Join(outside, "base")},
			src: Source{Path: "app"}, field: "app/kustomization.yaml: resources[0]", reason: leavesLink},
		{name: "kustomization patch linked out", files: map[string]string{"app/kustomization.yaml": "resources:\n- cm.yaml\npatches:\n- path: p.yaml\n", "app/cm.yaml": stolen, "app/p.yaml": "->" + secret},
			src: Source{Path: "app"}, field: "app/kustomization.yaml: patches[0].path", reason: leavesLink},
		{name: "kustomization patch above the root", files: map[string]string{"app/kustomization.yaml": "resources:\n- cm.yaml\npatchesStrategicMerge:\n- ../../secret.yaml\n", "app/cm.yaml": stolen},
			src: Source{Path: "app"}, field: "app/kustomization.yaml: patchesStrategicMerge[0]", reason: leavesParent},
		{name: "kustomization generator file above the root", files: map[string]string{"app/kustomization.yaml": "configMapGenerator:\n- name: g\n  files:\n  - key=../../secret.yaml\n"},
			src: Source{Path: "app"}, field: "app/kustomization.yaml: configMapGenerator[0].files[0]", reason: leavesParent},
		{name: "kustomization remote file", files: map[string]string{"app/kustomization.yaml": "resources:\n- https://127.0.0.1:1/secret.yaml\n"},
			src: Source{Path: "app"}, field: "app/kustomization.yaml: resources[0]", reason: leavesRemote},
		{name: "kustomization remote base", files: map[string]string{"app/kustomization.yaml": "resources:\n- github.com/org/repo//deploy?ref=v1\n"},
			src: Source{Path: "app"}, field: "app/kustomization.yaml: resources[0]", reason: leavesRemote},
		{name: "remote in a base the kustomization reaches", files: map[string]string{"app/kustomization.yaml": "resources:\n- ../base\n", "base/kustomization.yaml": "components:\n- git@example.com:org/repo.git\n"},
			src: Source{Path: "app"}, field: "base/kustomization.yaml: components[0]", reason: leavesRemote},
		{name: "kustomization reading its open file linked out", files: map[string]string{"app/kustomization.yaml": "->" + filepath.Join(outside, "base", "kustomization.yaml")},
			src: Source{Path: "app"}, field: "app", reason: leavesLink},
		{name: "kustomization with a base in the tree", files: map[string]string{"app/kustomization.yaml": "resources:\n- ../base\n", "base/kustomization.yaml": "resources:\n- cm.yaml\n", "base/cm.yaml": stolen},
			src: Source{Path: "app"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			sourcetest.WriteTree(t, root, tt.files)
			src := tt.src
			src.Root = root
			r, err := Render(src)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("render: %v", err)
				}
				return
			}
			var pe *PathError
			if !errors.As(err, &pe) {
				t.Fatalf("render: %v (objects %v), want a PathError", err, r)
			}
			if pe.Field != tt.field || pe.Reason != tt.reason {
				t.Fatalf("refused %q for %q, want %q for %q (%v)", pe.Reason, pe.Field, tt.reason, tt.field, err)
			}
		})
	}
}

// TestRenderDefaultRoot: with no root given, a path on disk is rendered in
// its git work tree, so an overlay reaches its base there, and nothing
// beyond it.
func TestRenderDefaultRoot(t *testing.T) {
	dir := t.TempDir()
	sourcetest.WriteTree(t, dir, map[string]string{
		"secret.yaml":                    stolen,
		"repo/.git/HEAD":                 "ref: refs/heads/main\n",
		"repo/base/kustomization.yaml":   "resources:\n- cm.yaml\n",
		"repo/base/cm.yaml":              stolen,
		"repo/app/kustomization.yaml":    "resources:\n- ../base\n",
		"repo/leak/kustomization.yaml":   "resources:\n- ../../secret.yaml\n",
		"repo/linked/kustomization.yaml": "resources:\n- cm.yaml\n",
		"repo/linked/cm.yaml":            "->" + filepath.Join(dir, "secret.yaml"),
	})
	if _, err := Render(Source{Path: filepath.Join(dir, "repo", "app")}); err != nil {
		t.Fatalf("overlay with its base in the work tree: %v", err)
	}
	for _, p := range []string{"leak", "linked"} {
		var pe *PathError
		if _, err := Render(Source{Path: filepath.Join(dir, "repo", p)}); !errors.As(err, &pe) {
			t.Errorf("%s: %v, want a PathError", p, err)
		}
	}
	root, err := SourceRoot(filepath.Join(dir, "repo", "app", "kustomization.yaml"))
	if err != nil || root != filepath.Join(dir, "repo") {
		t.Errorf("SourceRoot %q %v, want the work tree", root, err)
	}
}

// FuzzLocal: a path local accepts names a file inside the root, whatever
// its dots, slashes and separators; one it refuses is a PathError.
func FuzzLocal(f *testing.F) {
	for _, s := range []string{"", ".", "a/b", "../x", "a/../../x", "/etc/passwd", "a/./b/../c", "..", "a/..", `..\x`, "a//b/", "a/.../b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := local("valuesFiles[0]", p)
		if err != nil {
			var pe *PathError
			if !errors.As(err, &pe) || pe.Field != "valuesFiles[0]" || pe.Path == "" {
				t.Fatalf("local(%q): %v, want a PathError naming the field", p, err)
			}
			return
		}
		root := "/srv/root"
		full := filepath.Join(root, rel)
		if full != root && !strings.HasPrefix(full, root+string(filepath.Separator)) {
			t.Fatalf("local(%q) = %q, which is %s: outside the root", p, rel, full)
		}
	})
}

// FuzzRemote: whatever kustomize would fetch (a URL of any scheme, an
// scp-style remote) remote says is remote.
func FuzzRemote(f *testing.F) {
	for _, s := range []string{"https://h/x.yaml", "ssh://git@h/r.git", "git@h:org/r.git", "github.com/org/r", "file:///srv/r", "base", "../base"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if strings.Contains(p, "://") && !remote(p) {
			t.Fatalf("remote(%q) is false for a URL", p)
		}
	})
}
