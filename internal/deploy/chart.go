package deploy

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"

	"fke.dev/fke/internal/confine"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/ignore"
)

// maxChartLinks bounds the links to directories followed on one path of a
// chart (a link to an ancestor would otherwise be walked forever).
const maxChartLinks = 8

// loadChart loads the chart in dir (relative to the tree's root) as Helm's
// own directory loader does — .helmignore honoured, links followed, files
// of irregular kinds or over Helm's size limit refused — but reads every
// file through the tree's root, so that a link out of the tree is refused
// rather than read.
func loadChart(t *tree, dir string) (*chart.Chart, error) {
	field := "chart " + filepath.ToSlash(dir)
	rules := ignore.Empty()
	data, err := t.root.ReadFile(filepath.Join(dir, ignore.HelmIgnore))
	switch {
	case err == nil:
		if rules, err = ignore.Parse(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", field, ignore.HelmIgnore, err)
		}
	case confine.Escapes(err):
		return nil, &PathError{Field: field, Path: ignore.HelmIgnore, Reason: leavesLink}
	}
	rules.AddDefaults()

	var files []*loader.BufferedFile
	var walk func(name string, links int) error
	walk = func(name string, links int) error {
		des, err := fs.ReadDir(t.root.FS(), path.Join(filepath.ToSlash(dir), name))
		if err != nil {
			return check(field, name, err)
		}
		for _, d := range des {
			n := path.Join(name, d.Name())
			full := filepath.Join(dir, filepath.FromSlash(n))
			st, err := t.root.Stat(full)
			if err != nil {
				return check(field, n, err)
			}
			if rules.Ignore(n, st) {
				continue
			}
			if st.IsDir() {
				next := links
				if d.Type()&fs.ModeSymlink != 0 {
					if next++; next > maxChartLinks {
						return fmt.Errorf("%s: %s: more than %d links to directories on one path", field, n, maxChartLinks)
					}
				}
				if err := walk(n, next); err != nil {
					return err
				}
				continue
			}
			if !st.Mode().IsRegular() {
				return fmt.Errorf("%s: %s is not a regular file", field, n)
			}
			if st.Size() > loader.MaxDecompressedFileSize {
				return fmt.Errorf("%s: %s is larger than Helm's limit of %d bytes", field, n, loader.MaxDecompressedFileSize)
			}
			data, err := t.root.ReadFile(full)
			if err != nil {
				return check(field, n, err)
			}
			files = append(files, &loader.BufferedFile{Name: n, Data: bytes.TrimPrefix(data, []byte{0xEF, 0xBB, 0xBF})})
		}
		return nil
	}
	if err := walk("", 0); err != nil {
		return nil, err
	}
	return loader.LoadFiles(files)
}
