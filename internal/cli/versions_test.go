package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"fke.dev/fke/internal/versions"
)

func runVersions(t *testing.T, args ...string) string {
	t.Helper()
	root := NewRoot()
	var out strings.Builder
	root.SetOut(&out)
	root.SetArgs(append([]string{"versions"}, args...))
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestVersionsCmd(t *testing.T) {
	out := runVersions(t)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("fke versions printed %q, want a header and two versions", out)
	}
	if f := strings.Fields(lines[1]); f[0] != versions.Previous || f[1] != versions.Default {
		t.Errorf("row %q: want %s upgradable to %s", lines[1], versions.Previous, versions.Default)
	}
	if f := strings.Fields(lines[2]); f[0] != versions.Default || f[1] != "yes" || f[2] != "-" {
		t.Errorf("row %q: want %s, the default, with no upgrade", lines[2], versions.Default)
	}

	var rows []versionInfo
	if err := json.Unmarshal([]byte(runVersions(t, "-o", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Version != versions.Previous || strings.Join(rows[0].UpgradesTo, ",") != versions.Default || !rows[1].Default {
		t.Errorf("-o json: %+v", rows)
	}
}
