package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
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

// Source is what to render.
type Source struct {
	// Path is a manifest file or a directory.
	Path string
	// ValuesFiles are Helm values files, merged in order (later wins).
	ValuesFiles []string
	// Set are Helm --set expressions (k=v, a.b=c, list={a,b}), applied
	// after the values files.
	Set []string
	// ReleaseName and Namespace are the chart's .Release.Name and
	// .Release.Namespace.
	ReleaseName, Namespace string
	// KubeVersion is the chart's .Capabilities.KubeVersion (and what a
	// chart's kubeVersion constraint is checked against); "" means Helm's
	// default.
	KubeVersion string
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

// Render renders src. Nothing is sent anywhere; the errors name the file
// (and line, template or values key) at fault.
func Render(src Source) (*Rendered, error) {
	st, err := os.Stat(src.Path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("source %s does not exist", src.Path)
		}
		return nil, fmt.Errorf("reading source: %w", err)
	}
	var entries []string
	if st.IsDir() {
		des, err := os.ReadDir(src.Path)
		if err != nil {
			return nil, fmt.Errorf("reading source: %w", err)
		}
		for _, d := range des {
			entries = append(entries, d.Name())
		}
	}
	kind := DetectKind(st.IsDir(), entries)
	if kind != SourceHelm && (len(src.ValuesFiles) > 0 || len(src.Set) > 0) {
		return nil, fmt.Errorf("--values and --set apply to Helm charts; %s is %s", src.Path, kind)
	}
	r := &Rendered{Kind: kind}
	switch kind {
	case SourceHelm:
		r.Objects, err = renderChart(src)
	case SourceKustomize:
		r.Objects, err = renderKustomization(src.Path)
	default:
		r.Objects, err = renderManifests(src.Path, st.IsDir())
	}
	if err != nil {
		return nil, err
	}
	if len(r.Objects) == 0 {
		return nil, fmt.Errorf("source %s holds no objects", src.Path)
	}
	if r.Digest, err = digest(src); err != nil {
		return nil, err
	}
	return r, nil
}

func manifestFiles(root string, isDir bool) ([]string, error) {
	if !isDir {
		return []string{root}, nil
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		switch filepath.Ext(p) {
		case ".yaml", ".yml", ".json":
			if !d.IsDir() {
				files = append(files, p)
			}
		}
		return nil
	})
	return files, err
}

func renderManifests(root string, isDir bool) ([]*unstructured.Unstructured, error) {
	files, err := manifestFiles(root, isDir)
	if err != nil {
		return nil, fmt.Errorf("reading source: %w", err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading source: %w", err)
		}
		objs, err := ParseManifests(f, data)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

func renderKustomization(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomization %s does not build: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, res := range rm.Resources() {
		m, err := res.Map()
		if err != nil {
			return nil, fmt.Errorf("kustomization %s: %s: %w", dir, res.CurId(), err)
		}
		objs, err := toObjects(m)
		if err != nil {
			return nil, fmt.Errorf("kustomization %s: %s: %w", dir, res.CurId(), err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// renderChart renders a chart's templates with its values, the values
// files and the --set expressions, as `helm template` does (no cluster is
// asked; lookup returns nothing). CRDs of the chart's crds/ directory come
// first.
func renderChart(src Source) ([]*unstructured.Unstructured, error) {
	ch, err := loader.Load(src.Path)
	if err != nil {
		return nil, fmt.Errorf("chart %s does not load: %w", src.Path, err)
	}
	vals := map[string]any{}
	for _, f := range src.ValuesFiles {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			return nil, fmt.Errorf("values file %s: %w", f, err)
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
			return nil, fmt.Errorf("chart %s requires kubeVersion %s, which is incompatible with Kubernetes %s", src.Path, want, kv)
		}
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: name, Namespace: src.Namespace, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return nil, fmt.Errorf("chart %s: values: %w", src.Path, err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, fmt.Errorf("chart %s does not render: %w", src.Path, err)
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
			return nil, fmt.Errorf("chart %s renders invalid YAML: %w", src.Path, err)
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

// digest hashes the source's files (names and contents, in lexical
// order), the values files and the --set expressions.
func digest(src Source) (string, error) {
	h := sha256.New()
	add := func(p string) error {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(p), len(data))
		h.Write(data)
		return nil
	}
	root := src.Path
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), len(data))
		h.Write(data)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hashing source: %w", err)
	}
	for _, f := range src.ValuesFiles {
		if err := add(f); err != nil {
			return "", fmt.Errorf("hashing values: %w", err)
		}
	}
	for _, s := range src.Set {
		fmt.Fprintf(h, "set\x00%s\x00", s)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
