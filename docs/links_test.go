// Package docs holds fke's documentation; its test keeps the links valid.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
)

// anchor is GitHub's anchor of a heading: lower case, spaces to hyphens,
// punctuation but hyphens and underscores dropped.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLinks: every relative link of the READMEs and docs/ names a file of
// the repository, and every #fragment a heading of that file.
func TestLinks(t *testing.T) {
	root := ".."
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "bench", "README.md")}
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue // this test reaches no network
			}
			path, frag, _ := strings.Cut(target, "#")
			dst := f
			if path != "" {
				dst = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
			}
			checked++
			body, err := os.ReadFile(dst)
			if err != nil {
				if st, serr := os.Stat(dst); serr == nil && st.IsDir() {
					continue
				}
				t.Errorf("%s links to %s: no such file", f, target)
				continue
			}
			if frag == "" {
				continue
			}
			found := false
			for _, h := range heading.FindAllStringSubmatch(string(body), -1) {
				if anchor(h[1]) == frag {
					found = true
				}
			}
			if !found {
				t.Errorf("%s links to %s: %s has no heading #%s", f, target, dst, frag)
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked %d links; the README alone has more", checked)
	}
}
