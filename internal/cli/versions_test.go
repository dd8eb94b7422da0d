package cli

import (
	"strings"
	"testing"

	"fke.dev/fke/internal/versions"
)

func TestVersionsCmd(t *testing.T) {
	root := NewRoot()
	var out strings.Builder
	root.SetOut(&out)
	root.SetArgs([]string{"versions"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := versions.Default + " (default)\n"; !strings.Contains(out.String(), want) {
		t.Fatalf("fke versions printed %q, want a line %q", out.String(), want)
	}
}
