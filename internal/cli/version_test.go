package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fke.dev/fke/internal/binaries"
)

// TestVersionCmd: fke version reads each component's version from the
// binary it finds (here this test's own binary, copied in as kwok) and says
// which are not built; fke's own row carries the toolchain.
func TestVersionCmd(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, binaries.Kwok), data, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	t.Setenv(binaries.EnvDir, dir)
	run := func(args ...string) string {
		root := NewRoot()
		var out strings.Builder
		root.SetOut(&out)
		root.SetArgs(append([]string{"version", "--bin-dir", dir}, args...))
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	var rep versionReport
	if err := json.Unmarshal([]byte(run("-o", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.FKE.Go == "" {
		t.Errorf("fke's row %+v has no toolchain", rep.FKE)
	}
	seen := map[string]componentVersion{}
	for _, c := range rep.Components {
		seen[c.Name] = c
	}
	if k := seen[binaries.Kwok]; k.Module != "fke.dev/fke" || k.Path != filepath.Join(dir, binaries.Kwok) || k.Error != "" {
		t.Errorf("kwok: %+v, want the stamp of the binary copied in", k)
	}
	if a := seen[binaries.KubeAPIServer]; a.Error != "not built" {
		t.Errorf("kube-apiserver: %+v, want not built", a)
	}
	table := run()
	if !strings.HasPrefix(table, "fke ") || !strings.Contains(table, "COMPONENT") || !strings.Contains(table, "kube-apiserver") {
		t.Errorf("table:\n%s", table)
	}
}
