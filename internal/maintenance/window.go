// Package maintenance decides when disruptive operations fke starts on its
// own may begin: a cluster's maintenance window, and which version an
// automatic upgrade moves a cluster to. Pure functions of their inputs.
package maintenance

import (
	"fmt"
	"slices"
	"time"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/versions"
)

var weekdays = map[fkev1.Weekday]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

// opening returns the start of the window opening on the day of t (UTC).
func opening(w *fkev1.MaintenanceWindow, t time.Time) (time.Time, error) {
	var h, m int
	if _, err := fmt.Sscanf(w.Start, "%02d:%02d", &h, &m); err != nil {
		return time.Time{}, fmt.Errorf("maintenance start %q is not HH:MM: %w", w.Start, err)
	}
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), h, m, 0, 0, time.UTC), nil
}

// opensOn reports whether the window opens on weekday d.
func opensOn(w *fkev1.MaintenanceWindow, d time.Weekday) bool {
	return len(w.Days) == 0 || slices.ContainsFunc(w.Days, func(x fkev1.Weekday) bool { return weekdays[x] == d })
}

// Open reports whether now is inside window w; a nil window is always open.
// It also returns when the window (this one, or the next) closes or opens:
// the end of the current window when open, else the next opening.
func Open(w *fkev1.MaintenanceWindow, now time.Time) (bool, time.Time, error) {
	if w == nil {
		return true, time.Time{}, nil
	}
	// A window may have opened on one of the two days before (it lasts up
	// to 24 h, so it can span midnight).
	for back := 1; back >= 0; back-- {
		day := now.AddDate(0, 0, -back)
		start, err := opening(w, day)
		if err != nil {
			return false, time.Time{}, err
		}
		if !opensOn(w, start.Weekday()) {
			continue
		}
		end := start.Add(w.Duration.Duration)
		if !now.Before(start) && now.Before(end) {
			return true, end, nil
		}
	}
	for ahead := 0; ahead <= 7; ahead++ {
		start, err := opening(w, now.AddDate(0, 0, ahead))
		if err != nil {
			return false, time.Time{}, err
		}
		if start.After(now) && opensOn(w, start.Weekday()) {
			return false, start, nil
		}
	}
	return false, time.Time{}, fmt.Errorf("maintenance window %s opens on no day", w.Start)
}

// AutoUpgradeTarget returns the version an automatic upgrade under policy
// moves a cluster at from to: the newest version this fke runs that is a
// newer patch of the same minor (patch), or also of the next minor (minor);
// "" when there is none or the policy is none.
func AutoUpgradeTarget(from string, policy fkev1.AutoUpgradePolicy) string {
	f, err := versions.Parse(from)
	if err != nil {
		return ""
	}
	best := ""
	for _, v := range versions.UpgradeTargets(from) {
		t, _ := versions.Parse(v)
		switch policy {
		case fkev1.AutoUpgradePatch:
			if t.Minor != f.Minor {
				continue
			}
		case fkev1.AutoUpgradeMinor:
		default:
			continue
		}
		best = v // UpgradeTargets is oldest first
	}
	return best
}
