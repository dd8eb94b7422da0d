package cli

import (
	"encoding/json"
	"fmt"
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

func TestParseMaintenance(t *testing.T) {
	good := map[string]string{"22:00/4h": "22:00 4h0m0s []", "03:00/30m/Sat,Sun": "03:00 30m0s [Sat Sun]", "": "<nil>"}
	for in, want := range good {
		w, err := parseMaintenance(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		got := "<nil>"
		if w != nil {
			got = fmt.Sprintf("%s %s %v", w.Start, w.Duration.Duration, w.Days)
		}
		if got != want {
			t.Errorf("%q: got %s, want %s", in, got, want)
		}
	}
	bad := map[string]string{"22:00": "START/DURATION", "25:00/4h": "HH:MM", "2:00/4h": "HH:MM", "22:00/10m": "between 30m and 24h",
		"22:00/4h/Monday": `day "Monday"`, "22:00/48h": "between 30m and 24h"}
	for in, want := range bad {
		if _, err := parseMaintenance(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %q", in, err, want)
		}
	}
}
