package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestReferenceIsCurrent: docs/reference/cli.md is what the commands say
// of themselves; after a change to a command, `make docs` writes it again.
func TestReferenceIsCurrent(t *testing.T) {
	for k, v := range ReferenceEnv {
		t.Setenv(k, v)
	}
	var b bytes.Buffer
	if err := WriteReference(&b, NewRoot()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "docs", "reference", "cli.md")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with `make docs`)", err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		t.Errorf("%s is not the commands' current help: run `make docs`", path)
	}
	for _, want := range []string{"## fke cluster create", "## fke nodepool create", "## fke deploy", "## fke version"} {
		if !bytes.Contains(b.Bytes(), []byte(want+"\n")) {
			t.Errorf("the reference has no section %q", want)
		}
	}
}
