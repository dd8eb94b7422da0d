package deploy

import (
	"errors"
	"strings"
	"testing"
)

func TestParseManifests(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string // kind/name
		wantErr string
	}{
		{name: "two documents and an empty one", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: b}\n", want: []string{"ConfigMap/a", "Secret/b"}},
		{name: "a list is expanded", in: `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}]}`, want: []string{"ConfigMap/a"}},
		{name: "only comments", in: "# nothing\n", want: nil},
		{name: "bad indentation names its line", in: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n   labels: x\n", wantErr: "app.yaml:5: invalid YAML: mapping values are not allowed in this context"},
		{name: "line counts across documents", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: [\n", wantErr: "app.yaml:6: invalid YAML"},
		{name: "no kind", in: "apiVersion: v1\nmetadata: {name: a}\n", wantErr: "app.yaml:1: object has no kind"},
		{name: "no apiVersion", in: "---\nkind: ConfigMap\nmetadata: {name: a}\n", wantErr: "app.yaml:2: ConfigMap has no apiVersion"},
		{name: "no name", in: "apiVersion: v1\nkind: ConfigMap\n", wantErr: "app.yaml:1: ConfigMap has no metadata.name"},
		{name: "generateName", in: "apiVersion: batch/v1\nkind: Job\nmetadata: {generateName: run-}\n", wantErr: "generateName cannot be applied"},
		{name: "a scalar document", in: "hello\n", wantErr: "app.yaml:1: a manifest must be a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := ParseManifests("app.yaml", []byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				var pe *ParseError
				if !errors.As(err, &pe) || pe.File != "app.yaml" {
					t.Fatalf("error %T %v is not a ParseError naming the file", err, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDetectKind(t *testing.T) {
	tests := []struct {
		dir     bool
		entries []string
		want    SourceKind
	}{
		{false, nil, SourceManifests},
		{true, []string{"a.yaml"}, SourceManifests},
		{true, []string{"kustomization.yaml", "a.yaml"}, SourceKustomize},
		{true, []string{"Kustomization"}, SourceKustomize},
		{true, []string{"Chart.yaml", "kustomization.yaml"}, SourceHelm},
	}
	for _, tt := range tests {
		if got := DetectKind(tt.dir, tt.entries); got != tt.want {
			t.Errorf("DetectKind(%v, %v) = %s, want %s", tt.dir, tt.entries, got, tt.want)
		}
	}
}

func names(r *Rendered) string {
	var s []string
	for _, o := range r.Objects {
		n := o.GetKind() + "/" + o.GetName()
		if o.GetNamespace() != "" {
			n = o.GetNamespace() + "/" + n
		}
		s = append(s, n)
	}
	return strings.Join(s, ",")
}

func TestRender(t *testing.T) {
	vals := Values{Name: "prod.yaml", Data: []byte("replicas: 3\nimage: registry.local/web:2\n")}
	tests := []struct {
		name    string
		src     Source
		kind    SourceKind
		want    string
		check   func(t *testing.T, r *Rendered)
		wantErr string
	}{
		{name: "manifest directory, recursive", src: Source{Path: "testdata/manifests"}, kind: SourceManifests, want: "Namespace/shop,shop/ConfigMap/one,ConfigMap/two"},
		{name: "one file", src: Source{Path: "testdata/manifests/a.yaml"}, kind: SourceManifests, want: "Namespace/shop,shop/ConfigMap/one"},
		{name: "kustomization", src: Source{Path: "testdata/kustomize"}, kind: SourceKustomize, want: "shop/ConfigMap/dev-settings",
			check: func(t *testing.T, r *Rendered) {
				if r.Objects[0].GetLabels()["env"] != "dev" {
					t.Errorf("labels %v, want env=dev", r.Objects[0].GetLabels())
				}
			}},
		{name: "chart with its defaults", src: Source{Path: "testdata/chart", ReleaseName: "shop", KubeVersion: "v1.37.2"}, kind: SourceHelm, want: "Deployment/shop",
			check: func(t *testing.T, r *Rendered) { wantReplicas(t, r, 1, "registry.local/web:1") }},
		{name: "chart with values and --set", src: Source{Path: "testdata/chart", ReleaseName: "shop", Values: []Values{vals}, Set: []string{"replicas=5"}, KubeVersion: "v1.37.2"}, kind: SourceHelm, want: "Deployment/shop",
			check: func(t *testing.T, r *Rendered) { wantReplicas(t, r, 5, "registry.local/web:2") }},
		{name: "chart whose kubeVersion the cluster does not meet", src: Source{Path: "testdata/chart", KubeVersion: "v1.29.0"}, wantErr: "incompatible with Kubernetes v1.29.0"},
		{name: "missing path", src: Source{Path: "testdata/nothing"}, wantErr: "source testdata/nothing does not exist"},
		{name: "chart that does not render", src: Source{Path: "testdata/badchart"}, wantErr: "chart testdata/badchart does not render"},
		{name: "values on manifests", src: Source{Path: "testdata/manifests", Set: []string{"a=b"}}, wantErr: "--values and --set apply to Helm charts"},
		{name: "bad --set", src: Source{Path: "testdata/chart", Set: []string{"a"}, KubeVersion: "v1.37.2"}, wantErr: "--set a:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Render(tt.src)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Kind != tt.kind || names(r) != tt.want {
				t.Fatalf("rendered %s %s, want %s %s", r.Kind, names(r), tt.kind, tt.want)
			}
			if !strings.HasPrefix(r.Digest, "sha256:") {
				t.Errorf("digest %q", r.Digest)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

func wantReplicas(t *testing.T, r *Rendered, n int64, image string) {
	t.Helper()
	got, _, _ := unstructuredInt(r.Objects[0].Object, "spec", "replicas")
	c := r.Objects[0].Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if got != n || c["image"] != image {
		t.Errorf("replicas %d image %v, want %d %s", got, c["image"], n, image)
	}
}

func TestDigestFollowsInputs(t *testing.T) {
	a, err := Render(Source{Path: "testdata/chart", KubeVersion: "v1.37.2"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Render(Source{Path: "testdata/chart", KubeVersion: "v1.37.2"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Render(Source{Path: "testdata/chart", Set: []string{"replicas=2"}, KubeVersion: "v1.37.2"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest || a.Digest == c.Digest {
		t.Fatalf("digests %s %s %s: want the first two equal, the third different", a.Digest, b.Digest, c.Digest)
	}
}

func TestMergeValues(t *testing.T) {
	dst := map[string]any{"a": 1, "m": map[string]any{"x": 1, "y": 2}}
	got := mergeValues(dst, map[string]any{"b": 2, "m": map[string]any{"y": 3}})
	m := got["m"].(map[string]any)
	if got["a"] != 1 || got["b"] != 2 || m["x"] != 1 || m["y"] != 3 {
		t.Fatalf("merged %v", got)
	}
}

func unstructuredInt(obj map[string]any, fields ...string) (int64, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false, nil
		}
		cur = m[f]
	}
	switch v := cur.(type) {
	case int64:
		return v, true, nil
	case float64:
		return int64(v), true, nil
	}
	return 0, false, nil
}
