package maintenance

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/versions"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	nightly := &fkev1.MaintenanceWindow{Start: "22:00", Duration: metav1.Duration{Duration: 4 * time.Hour}}
	weekend := &fkev1.MaintenanceWindow{Start: "03:00", Duration: metav1.Duration{Duration: time.Hour}, Days: []fkev1.Weekday{"Sat", "Sun"}}
	// 2026-12-05 is a Saturday.
	cases := []struct {
		name     string
		w        *fkev1.MaintenanceWindow
		now      string
		open     bool
		boundary string
	}{
		{"no window is always open", nil, "2026-12-01T12:00:00Z", true, ""},
		{"before tonight's window", nightly, "2026-12-01T21:59:00Z", false, "2026-12-01T22:00:00Z"},
		{"inside, same day", nightly, "2026-12-01T23:00:00Z", true, "2026-12-02T02:00:00Z"},
		{"inside, after midnight", nightly, "2026-12-02T01:59:00Z", true, "2026-12-02T02:00:00Z"},
		{"just closed", nightly, "2026-12-02T02:00:00Z", false, "2026-12-02T22:00:00Z"},
		{"weekday waits for Saturday", weekend, "2026-12-01T03:30:00Z", false, "2026-12-05T03:00:00Z"},
		{"Saturday inside", weekend, "2026-12-05T03:30:00Z", true, "2026-12-05T04:00:00Z"},
		{"Sunday after it closed waits a week", weekend, "2026-12-06T05:00:00Z", false, "2026-12-12T03:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			open, boundary, err := Open(c.w, at(c.now))
			if err != nil {
				t.Fatal(err)
			}
			if open != c.open {
				t.Errorf("open = %v, want %v", open, c.open)
			}
			if c.boundary != "" && !boundary.Equal(at(c.boundary)) {
				t.Errorf("boundary = %s, want %s", boundary, c.boundary)
			}
		})
	}
}

func TestAutoUpgradeTarget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		from   string
		policy fkev1.AutoUpgradePolicy
		want   string
	}{
		{versions.Previous, fkev1.AutoUpgradeNone, ""},
		{versions.Previous, "", ""},
		{versions.Previous, fkev1.AutoUpgradePatch, ""},
		{versions.Previous, fkev1.AutoUpgradeMinor, versions.Default},
		{"v1.36.0", fkev1.AutoUpgradePatch, versions.Previous},
		{"v1.36.0", fkev1.AutoUpgradeMinor, versions.Default},
		{versions.Default, fkev1.AutoUpgradeMinor, ""},
	}
	for _, c := range cases {
		if got := AutoUpgradeTarget(c.from, c.policy); got != c.want {
			t.Errorf("AutoUpgradeTarget(%s, %s) = %q, want %q", c.from, c.policy, got, c.want)
		}
	}
}
