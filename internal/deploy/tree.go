package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"fke.dev/fke/internal/confine"
)

// A source's files are users' content: a Release's repository, a directory
// a CI job checked out. fke-manager renders Releases as root, so every path
// a source names — the path to render, its values files, a kustomization's
// resources and patches, a chart's files — is opened inside the source's
// tree through os.Root, symbolic links included. A path that leaves the
// tree is refused with a PathError naming the field that named it.

// PathError says that a path a source names leaves the source's tree.
type PathError struct {
	// Field is where the path was named, such as "valuesFiles[0]" or
	// "overlays/prod/kustomization.yaml: resources[1]".
	Field string
	// Path is the path as it was named.
	Path string
	// Reason says how it leaves the tree (one of the leaves* constants).
	Reason string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("%s: %q %s; fke reads only files inside the source tree", e.Field, e.Path, e.Reason)
}

// How a path leaves the tree.
const (
	leavesAbsolute = "is an absolute path"
	leavesParent   = "goes above the root of the source"
	leavesLink     = "is, or passes through, a symbolic link that leaves the source tree"
	leavesRemote   = "is remote (fke renders what the source holds and fetches nothing else)"
)

// tree is a source tree opened for reading: nothing outside dir can be
// read through it.
type tree struct {
	root *os.Root
	// dir is the tree's absolute path (kustomize works on absolute paths;
	// messages name paths relative to it).
	dir string
}

func openTree(dir string) (*tree, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("source root %s: %w", dir, err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("source root %s does not exist", dir)
		}
		return nil, fmt.Errorf("opening source root %s: %w", dir, err)
	}
	return &tree{root: root, dir: abs}, nil
}

func (t *tree) Close() error { return t.root.Close() }

// local checks p, a slash-separated path that field names relative to the
// root, without touching the disk, and returns it in the OS's form.
func local(field, p string) (string, error) {
	if p == "" {
		p = "."
	}
	if path.IsAbs(p) || filepath.IsAbs(p) {
		return "", &PathError{Field: field, Path: p, Reason: leavesAbsolute}
	}
	rel := filepath.FromSlash(path.Clean(p))
	if !filepath.IsLocal(rel) {
		return "", &PathError{Field: field, Path: p, Reason: leavesParent}
	}
	return rel, nil
}

// rel returns the path on disk p (absolute, or relative to the working
// directory) relative to the root, refusing one outside it.
func (t *tree) rel(field, p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(t.dir, abs)
	if err != nil || !filepath.IsLocal(rel) {
		return "", &PathError{Field: field, Path: p, Reason: leavesParent}
	}
	return rel, nil
}

// check turns os.Root's refusal of a path whose links lead out of the
// root into a PathError; other errors pass unchanged.
func check(field, p string, err error) error {
	if confine.Escapes(err) {
		return &PathError{Field: field, Path: p, Reason: leavesLink}
	}
	return err
}

// readFile reads rel (a local path) inside the tree; field names the path
// in errors.
func (t *tree) readFile(field, rel string) ([]byte, error) {
	data, err := t.root.ReadFile(rel)
	return data, check(field, filepath.ToSlash(rel), err)
}

// stat is os.Stat inside the tree (links are followed while they stay in it).
func (t *tree) stat(field, rel string) (fs.FileInfo, error) {
	st, err := t.root.Stat(rel)
	return st, check(field, filepath.ToSlash(rel), err)
}

// walkFiles calls fn for every regular file (or link to one inside the
// tree) under rel, in lexical order, skipping directories whose names start
// with a dot below rel. Links to directories are not followed. A link that
// leaves the tree is an error.
func (t *tree) walkFiles(rel string, fn func(rel string, data []byte) error) error {
	return fs.WalkDir(t.root.FS(), filepath.ToSlash(rel), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return check(p, p, err)
		}
		if d.IsDir() {
			if p != filepath.ToSlash(rel) && strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			st, err := t.stat(p, filepath.FromSlash(p))
			if err != nil {
				return err
			}
			if st.IsDir() {
				return nil
			}
		}
		data, err := t.readFile(p, filepath.FromSlash(p))
		if err != nil {
			return err
		}
		return fn(filepath.FromSlash(p), data)
	})
}

// SourceRoot is the tree a path on disk is rendered in when nothing else
// says: the top of the git work tree that holds it, else the directory it
// names (or holds it, for a file). Files the source names (a
// kustomization's bases, a chart's links) may reach anywhere in that tree,
// never out of it.
func SourceRoot(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	dir := abs
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		dir = filepath.Dir(abs)
	}
	for d := dir; ; {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return dir, nil
		}
		d = parent
	}
}
