package confine

import (
	"os"
	"path/filepath"
	"testing"
)

// TestEscapes keeps Escapes in step with os.Root's refusal.
func TestEscapes(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "in"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(dir, "in", "link")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(filepath.Join(dir, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, p := range []string{"../x", "link/in", "link"} {
		if _, err := root.Stat(p); !Escapes(err) {
			t.Errorf("os.Root's error for %s is %v: Escapes no longer recognises it", p, err)
		}
	}
	if err := root.Symlink("/etc", "ok"); err != nil {
		t.Fatal(err)
	}
	if err := root.MkdirAll("ok/sub", 0o700); !Escapes(err) {
		t.Errorf("MkdirAll through a link out: %v", err)
	}
	if _, err := root.Stat("missing"); err == nil || Escapes(err) {
		t.Errorf("a missing file counts as escaping: %v", err)
	}
	if Escapes(nil) {
		t.Error("nil escapes")
	}
}
