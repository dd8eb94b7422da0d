package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// SourceKind is how a source is rendered.
type SourceKind string

// The kinds of source the applier renders.
const (
	// SourceManifests is a file, or a directory of .yaml, .yml and .json
	// files (read recursively, in lexical order).
	SourceManifests SourceKind = "manifests"
	// SourceKustomize is a directory with a kustomization.yaml.
	SourceKustomize SourceKind = "kustomize"
	// SourceHelm is a chart directory (with a Chart.yaml).
	SourceHelm SourceKind = "helm"
)

// Source is what to render. Every file it reaches is read inside Root
// (see PathError).
type Source struct {
	// Root is the source's tree. When it is set, Path and ValuesFiles are
	// slash-separated paths relative to it; when it is "", Path is a path
	// on disk and Root is SourceRoot(Path).
	Root string
	// Path is a manifest file or a directory.
	Path string
	// ValuesFiles are Helm values files in the tree, merged in order (later
	// wins).
	ValuesFiles []string
	// Values are values the caller read itself (files named on fke
	// deploy's command line, a Release's inline values), merged after
	// ValuesFiles in order.
	Values []Values
	// Set are Helm --set expressions (k=v, a.b=c, list={a,b}), applied
	// after the values.
	Set []string
	// ReleaseName and Namespace are the chart's .Release.Name and
	// .Release.Namespace.
	ReleaseName, Namespace string
	// KubeVersion is the chart's .Capabilities.KubeVersion (and what a
	// chart's kubeVersion constraint is checked against); "" means Helm's
	// default.
	KubeVersion string
}

// Values is one document of Helm values (YAML or JSON).
type Values struct {
	// Name says where they came from, in errors.
	Name string
	Data []byte
}

// Rendered is a rendered source.
type Rendered struct {
	Kind    SourceKind
	Objects []*unstructured.Unstructured
	// Digest is the sha256 of the source's files and the values given,
	// "sha256:<hex>": equal for equal inputs.
	Digest string
}

// DetectKind says how the source at path is rendered (pure on the given
// directory listing): a directory holding Chart.yaml is a chart, one holding
// a kustomization file is a kustomization, anything else is manifests.
func DetectKind(isDir bool, entries []string) SourceKind {
	if !isDir {
		return SourceManifests
	}
	for _, e := range entries {
		if e == "Chart.yaml" {
			return SourceHelm
		}
	}
	for _, e := range entries {
		if slices.Contains(konfig, e) {
			return SourceKustomize
		}
	}
	return SourceManifests
}

var konfig = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// NotFoundError says that the path to render is not in the source's tree;
// it is fs.ErrNotExist for errors.Is.
type NotFoundError struct{ Path string }

func (e *NotFoundError) Error() string        { return fmt.Sprintf("source %s does not exist", e.Path) }
func (e *NotFoundError) Is(target error) bool { return target == fs.ErrNotExist }

// Render renders src. Nothing is sent anywhere; the errors name the file
// (and line, template or values key) at fault, and a path that leaves the
// source's tree is a *PathError.
func Render(src Source) (*Rendered, error) {
	root, shown := src.Root, src.Path
	if root == "" {
		var err error
		if root, err = SourceRoot(src.Path); err != nil {
			return nil, fmt.Errorf("reading source: %w", err)
		}
	}
	t, err := openTree(root)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	var rel string
	if src.Root == "" {
		rel, err = t.rel("path", src.Path)
	} else {
		rel, err = local("path", src.Path)
	}
	if err != nil {
		return nil, err
	}
	st, err := t.stat("path", rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &NotFoundError{Path: shown}
		}
		return nil, fmt.Errorf("reading source: %w", err)
	}
	var entries []string
	if st.IsDir() {
		des, err := fs.ReadDir(t.root.FS(), filepath.ToSlash(rel))
		if err != nil {
			return nil, fmt.Errorf("reading source: %w", err)
		}
		for _, d := range des {
			entries = append(entries, d.Name())
		}
	}
	kind := DetectKind(st.IsDir(), entries)
	if kind != SourceHelm && (len(src.ValuesFiles) > 0 || len(src.Values) > 0 || len(src.Set) > 0) {
		return nil, fmt.Errorf("--values and --set apply to Helm charts; %s is %s", shown, kind)
	}
	values, err := readValuesFiles(t, src.ValuesFiles)
	if err != nil {
		return nil, err
	}
	r := &Rendered{Kind: kind}
	switch kind {
	case SourceHelm:
		r.Objects, err = renderChart(t, rel, shown, src, values)
	case SourceKustomize:
		r.Objects, err = renderKustomization(t, rel)
	default:
		// Files are named as the caller named the source: below the path
		// given on disk, or from the root of a tree given as Root.
		name := func(p string) string { return filepath.ToSlash(p) }
		if src.Root == "" {
			name = func(p string) string {
				below, err := filepath.Rel(rel, p)
				if err != nil || below == "." {
					return src.Path
				}
				return filepath.Join(src.Path, below)
			}
		}
		r.Objects, err = renderManifests(t, rel, name)
	}
	if err != nil {
		return nil, err
	}
	if len(r.Objects) == 0 {
		return nil, fmt.Errorf("source %s holds no objects", shown)
	}
	if r.Digest, err = digest(t, rel, append(values, src.Values...), src.Set); err != nil {
		return nil, err
	}
	return r, nil
}

// readValuesFiles reads the values files in the tree, each checked and
// named by its index.
func readValuesFiles(t *tree, files []string) ([]Values, error) {
	var out []Values
	for i, f := range files {
		field := fmt.Sprintf("valuesFiles[%d]", i)
		rel, err := local(field, f)
		if err != nil {
			return nil, err
		}
		data, err := t.readFile(field, rel)
		if err != nil {
			var pe *PathError
			if errors.As(err, &pe) {
				pe.Path = f
				return nil, pe
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%s: values file %s does not exist", field, f)
			}
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		out = append(out, Values{Name: f, Data: data})
	}
	return out, nil
}

func renderManifests(t *tree, rel string, name func(string) string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	st, err := t.stat("path", rel)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		data, err := t.readFile("path", rel)
		if err != nil {
			return nil, fmt.Errorf("reading source: %w", err)
		}
		return ParseManifests(name(rel), data)
	}
	err = t.walkFiles(rel, func(p string, data []byte) error {
		switch filepath.Ext(p) {
		case ".yaml", ".yml", ".json":
		default:
			return nil
		}
		objs, err := ParseManifests(name(p), data)
		if err != nil {
			return err
		}
		out = append(out, objs...)
		return nil
	})
	return out, err
}

// renderChart renders a chart's templates with its values, the values
// files and the --set expressions, as `helm template` does (no cluster is
// asked; lookup returns nothing). CRDs of the chart's crds/ directory come
// first.
func renderChart(t *tree, rel, shown string, src Source, valuesFiles []Values) ([]*unstructured.Unstructured, error) {
	ch, err := loadChart(t, rel)
	if err != nil {
		var pe *PathError
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, fmt.Errorf("chart %s does not load: %w", shown, err)
	}
	vals := map[string]any{}
	for _, f := range append(valuesFiles, src.Values...) {
		v, err := chartutil.ReadValues(f.Data)
		if err != nil {
			return nil, fmt.Errorf("values file %s: %w", f.Name, err)
		}
		vals = mergeValues(vals, v.AsMap())
	}
	for _, s := range src.Set {
		if err := strvals.ParseInto(s, vals); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	name := src.ReleaseName
	if name == "" {
		name = ch.Name()
	}
	caps := chartutil.DefaultCapabilities.Copy()
	if src.KubeVersion != "" {
		kv, err := chartutil.ParseKubeVersion(src.KubeVersion)
		if err != nil {
			return nil, fmt.Errorf("kubernetes version %q: %w", src.KubeVersion, err)
		}
		caps.KubeVersion = *kv
		if want := ch.Metadata.KubeVersion; want != "" && !chartutil.IsCompatibleRange(want, kv.String()) {
			return nil, fmt.Errorf("chart %s requires kubeVersion %s, which is incompatible with Kubernetes %s", shown, want, kv)
		}
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: name, Namespace: src.Namespace, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return nil, fmt.Errorf("chart %s: values: %w", shown, err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, fmt.Errorf("chart %s does not render: %w", shown, err)
	}
	var out []*unstructured.Unstructured
	for _, crd := range ch.CRDObjects() {
		objs, err := ParseManifests(crd.Filename, crd.File.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		base := filepath.Base(n)
		if strings.HasPrefix(base, "_") || strings.HasSuffix(n, "NOTES.txt") || strings.TrimSpace(files[n]) == "" {
			continue
		}
		objs, err := ParseManifests(n, []byte(files[n]))
		if err != nil {
			return nil, fmt.Errorf("chart %s renders invalid YAML: %w", shown, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// mergeValues merges src into dst, src winning; nested maps are merged key
// by key as Helm merges values files (pure, dst is modified).
func mergeValues(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// digest hashes the source's files (names relative to the source's path
// and contents, in lexical order), the values and the --set expressions.
func digest(t *tree, rel string, values []Values, set []string) (string, error) {
	h := sha256.New()
	err := t.walkFiles(rel, func(p string, data []byte) error {
		name, err := filepath.Rel(rel, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(name), len(data))
		h.Write(data)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hashing source: %w", err)
	}
	for _, v := range values {
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(v.Name), len(v.Data))
		h.Write(v.Data)
	}
	for _, s := range set {
		fmt.Fprintf(h, "set\x00%s\x00", s)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
