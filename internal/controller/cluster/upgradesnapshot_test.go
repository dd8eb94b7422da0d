package cluster

import (
	"testing"
	"time"

	"fke.dev/fke/internal/backup"
)

// TestUpgradeSnapshot: an upgrade's snapshot step finds a snapshot of the
// same cluster taken since the upgrade started (its status write lost)
// instead of taking a second one; older snapshots and other clusters'
// do not count.
func TestUpgradeSnapshot(t *testing.T) {
	start := time.Date(2026, 12, 2, 9, 56, 4, 750_000_000, time.UTC)
	snap := func(name string, at time.Time, uid string) backup.Snapshot {
		return backup.Snapshot{Name: name, Time: at, ClusterUID: uid}
	}
	for _, tc := range []struct {
		name string
		kept []backup.Snapshot
		want string // "" none
	}{
		{"none kept", nil, ""},
		{"only older ones", []backup.Snapshot{snap("old", start.Add(-time.Hour), "u1")}, ""},
		{"taken in the start's second (times are stored to the second)", []backup.Snapshot{snap("s", start.Truncate(time.Second), "u1")}, "s"},
		{"taken after the start", []backup.Snapshot{snap("old", start.Add(-time.Hour), "u1"), snap("new", start.Add(time.Second), "u1")}, "new"},
		{"the newest of two since the start", []backup.Snapshot{snap("a", start.Add(time.Second), "u1"), snap("b", start.Add(2*time.Second), "u1")}, "b"},
		{"another cluster's (a deleted one of the same name)", []backup.Snapshot{snap("other", start.Add(time.Second), "u2")}, ""},
	} {
		got, ok := UpgradeSnapshot(tc.kept, start, "u1")
		if (tc.want == "") == ok || (ok && got.Name != tc.want) {
			t.Errorf("%s: got %q (%v), want %q", tc.name, got.Name, ok, tc.want)
		}
	}
}
