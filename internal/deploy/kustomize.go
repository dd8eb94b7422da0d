package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"fke.dev/fke/internal/confine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// renderKustomization builds the kustomization in dir (relative to the
// tree's root) on a file system confined to the tree, after checking that
// no kustomization it reaches names a remote base or file (kustomize would
// fetch those itself) or a path out of the tree.
func renderKustomization(t *tree, dir string) ([]*unstructured.Unstructured, error) {
	if err := checkKustomization(t, dir, map[string]bool{}); err != nil {
		return nil, err
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(treeFS{t}, filepath.Join(t.dir, dir))
	if err != nil {
		var pe *PathError
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, fmt.Errorf("kustomization %s does not build: %w", filepath.ToSlash(dir), err)
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

// scpLike matches git's scp-style remote (user@host:path), which kustomize
// clones.
var scpLike = regexp.MustCompile(`^[^/:]+@[^/:]+:`)

// remote reports whether kustomize would fetch p rather than read it from
// the tree: a URL (http, https, ssh, file, git …), a go-getter "git::"
// reference, an scp-style remote, or a github.com path.
func remote(p string) bool {
	l := strings.ToLower(p)
	return strings.Contains(l, "://") || strings.HasPrefix(l, "git::") || scpLike.MatchString(p) ||
		strings.HasPrefix(l, "github.com/") || strings.HasPrefix(l, "github.com:")
}

// checkKustomization reads the kustomization file of dir and each one its
// resources and components reach (seen guards against cycles) and refuses
// any path field that is remote or leaves the tree, naming the file and
// the field.
func checkKustomization(t *tree, dir string, seen map[string]bool) error {
	if seen[dir] {
		return nil
	}
	seen[dir] = true
	var (
		file string
		data []byte
	)
	for _, name := range konfig {
		d, err := t.root.ReadFile(filepath.Join(dir, name))
		if err == nil {
			file, data = filepath.ToSlash(filepath.Join(dir, name)), d
			break
		}
		if confine.Escapes(err) {
			return &PathError{Field: filepath.ToSlash(dir), Path: name, Reason: leavesLink}
		}
	}
	if file == "" {
		return nil // not a kustomization: kustomize says what is missing
	}
	var k types.Kustomization
	if err := yaml.Unmarshal(data, &k); err != nil {
		return fmt.Errorf("kustomization %s: %w", file, err)
	}
	for _, f := range kustomizationPaths(&k) {
		field := file + ": " + f.field
		if remote(f.path) {
			return &PathError{Field: field, Path: f.path, Reason: leavesRemote}
		}
		if path.IsAbs(f.path) || filepath.IsAbs(f.path) {
			return &PathError{Field: field, Path: f.path, Reason: leavesAbsolute}
		}
		rel, err := local(field, path.Join(filepath.ToSlash(dir), f.path))
		if err != nil {
			return &PathError{Field: field, Path: f.path, Reason: leavesParent}
		}
		st, err := t.stat(field, rel)
		if err != nil {
			var pe *PathError
			if errors.As(err, &pe) {
				pe.Path = f.path
				return pe
			}
			continue // missing: kustomize's own error names it
		}
		if f.descend && st.IsDir() {
			if err := checkKustomization(t, rel, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

type kustomizationPath struct {
	field, path string
	// descend: the path may be a directory holding a kustomization.
	descend bool
}

// kustomizationPaths lists the paths a kustomization names: resources,
// components and bases (which may be directories of their own), and the
// files of CRDs, configurations, plugins, patches, replacements, the
// OpenAPI schema and generators. Inline patches and plugin configurations
// (anything with a line break) are not paths.
func kustomizationPaths(k *types.Kustomization) []kustomizationPath {
	var out []kustomizationPath
	one := func(field, p string, descend bool) {
		if p != "" && !strings.Contains(p, "\n") {
			out = append(out, kustomizationPath{field, p, descend})
		}
	}
	list := func(field string, paths []string, descend bool) {
		for i, p := range paths {
			one(fmt.Sprintf("%s[%d]", field, i), p, descend)
		}
	}
	list("resources", k.Resources, true)
	list("components", k.Components, true)
	list("bases", k.Bases, true)
	list("generators", k.Generators, true)
	list("transformers", k.Transformers, true)
	list("validators", k.Validators, true)
	list("crds", k.Crds, false)
	list("configurations", k.Configurations, false)
	for i, p := range k.PatchesStrategicMerge {
		one(fmt.Sprintf("patchesStrategicMerge[%d]", i), string(p), false)
	}
	for i, p := range k.Patches {
		one(fmt.Sprintf("patches[%d].path", i), p.Path, false)
	}
	for i, p := range k.PatchesJson6902 {
		one(fmt.Sprintf("patchesJson6902[%d].path", i), p.Path, false)
	}
	for i, r := range k.Replacements {
		one(fmt.Sprintf("replacements[%d].path", i), r.Path, false)
	}
	one("openapi.path", k.OpenAPI["path"], false)
	generator := func(field string, a types.GeneratorArgs) {
		for j, src := range a.FileSources {
			// "key=path" or "path".
			if _, p, ok := strings.Cut(src, "="); ok {
				src = p
			}
			one(fmt.Sprintf("%s.files[%d]", field, j), src, false)
		}
		list(field+".envs", a.EnvSources, false)
		one(field+".env", a.EnvSource, false)
	}
	for i, g := range k.ConfigMapGenerator {
		generator(fmt.Sprintf("configMapGenerator[%d]", i), g.GeneratorArgs)
	}
	for i, g := range k.SecretGenerator {
		generator(fmt.Sprintf("secretGenerator[%d]", i), g.GeneratorArgs)
	}
	return out
}

// treeFS is kustomize's file system confined to a tree: paths are absolute
// paths inside the tree's directory, read through its os.Root; nothing is
// written.
type treeFS struct{ t *tree }

var _ filesys.FileSystem = treeFS{}

var errReadOnly = errors.New("a source is read-only while it renders")

func (f treeFS) rel(p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(f.t.dir, p)
	}
	rel, err := filepath.Rel(f.t.dir, filepath.Clean(p))
	if err != nil || !filepath.IsLocal(rel) {
		shown := p
		if err == nil {
			shown = filepath.ToSlash(rel)
		}
		return "", &PathError{Field: "kustomization", Path: shown, Reason: leavesParent}
	}
	return rel, nil
}

func (f treeFS) abs(rel string) string { return filepath.Join(f.t.dir, rel) }

func (treeFS) Create(string) (filesys.File, error) { return nil, errReadOnly }
func (treeFS) Mkdir(string) error                  { return errReadOnly }
func (treeFS) MkdirAll(string) error               { return errReadOnly }
func (treeFS) RemoveAll(string) error              { return errReadOnly }
func (treeFS) WriteFile(string, []byte) error      { return errReadOnly }

func (f treeFS) Open(p string) (filesys.File, error) {
	rel, err := f.rel(p)
	if err != nil {
		return nil, err
	}
	file, err := f.t.root.Open(rel)
	if err != nil {
		return nil, check("kustomization", filepath.ToSlash(rel), err)
	}
	return file, nil
}

func (f treeFS) IsDir(p string) bool {
	rel, err := f.rel(p)
	if err != nil {
		return false
	}
	st, err := f.t.root.Stat(rel)
	return err == nil && st.IsDir()
}

func (f treeFS) ReadDir(p string) ([]string, error) {
	rel, err := f.rel(p)
	if err != nil {
		return nil, err
	}
	des, err := fs.ReadDir(f.t.root.FS(), filepath.ToSlash(rel))
	if err != nil {
		return nil, check("kustomization", filepath.ToSlash(rel), err)
	}
	names := make([]string, len(des))
	for i, d := range des {
		names[i] = d.Name()
	}
	return names, nil
}

// CleanedAbs splits p into its directory and file name (file "" for a
// directory). Unlike kustomize's own, it does not resolve links: the
// tree's root confines every read whatever they point to.
func (f treeFS) CleanedAbs(p string) (filesys.ConfirmedDir, string, error) {
	rel, err := f.rel(p)
	if err != nil {
		return "", "", err
	}
	st, err := f.t.root.Stat(rel)
	if err != nil {
		return "", "", check("kustomization", filepath.ToSlash(rel), err)
	}
	if st.IsDir() {
		return filesys.ConfirmedDir(f.abs(rel)), "", nil
	}
	return filesys.ConfirmedDir(f.abs(filepath.Dir(rel))), filepath.Base(rel), nil
}

func (f treeFS) Exists(p string) bool {
	rel, err := f.rel(p)
	if err != nil {
		return false
	}
	_, err = f.t.root.Stat(rel)
	return err == nil
}

func (f treeFS) Glob(pattern string) ([]string, error) {
	rel, err := f.rel(pattern)
	if err != nil {
		return nil, err
	}
	matches, err := fs.Glob(f.t.root.FS(), filepath.ToSlash(rel))
	if err != nil {
		return nil, err
	}
	out := make([]string, len(matches))
	for i, m := range matches {
		out[i] = f.abs(filepath.FromSlash(m))
	}
	slices.Sort(out)
	return out, nil
}

func (f treeFS) ReadFile(p string) ([]byte, error) {
	rel, err := f.rel(p)
	if err != nil {
		return nil, err
	}
	return f.t.readFile("kustomization", rel)
}

func (f treeFS) Walk(p string, fn filepath.WalkFunc) error {
	rel, err := f.rel(p)
	if err != nil {
		return err
	}
	return fs.WalkDir(f.t.root.FS(), filepath.ToSlash(rel), func(q string, d fs.DirEntry, err error) error {
		abs := f.abs(filepath.FromSlash(q))
		if err != nil {
			return fn(abs, nil, check("kustomization", q, err))
		}
		info, err := d.Info()
		if err != nil {
			return fn(abs, nil, err)
		}
		return fn(abs, info, nil)
	})
}

// Open hands kustomize the root's *os.File.
var _ filesys.File = (*os.File)(nil)
