// Package sourcetest writes source trees for tests of what renders them.
package sourcetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// WriteTree writes files under dir: name (slash-separated) → content, where
// a content of "->target" makes a symbolic link to target.
func WriteTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
