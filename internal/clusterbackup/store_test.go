package clusterbackup

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
)

func TestBackupRecords(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	snap := func(name string) backup.Snapshot {
		return backup.Snapshot{Name: name, Time: t0, Size: 10, SHA256: "sum-" + name, Revision: 3}
	}
	snaps := func(names ...string) []backup.Snapshot {
		var out []backup.Snapshot
		for _, n := range names {
			out = append(out, snap(n))
		}
		return out
	}
	rec := func(name string, where ...fkev1.BackupLocation) fkev1.BackupRecord {
		return fkev1.BackupRecord{Name: name, Time: metav1.NewTime(t0), Size: 10, SHA256: "sum-" + name, Revision: 3, Locations: where}
	}
	local, s3 := fkev1.BackupLocal, fkev1.BackupS3
	for _, tc := range []struct {
		name          string
		prev          []fkev1.BackupRecord
		local, remote []backup.Snapshot
		remoteKnown   bool
		want          []fkev1.BackupRecord
	}{
		{"local only, no store", nil, snaps("a", "b"), nil, true, []fkev1.BackupRecord{rec("a", local), rec("b", local)}},
		{"both sides, by name", nil, snaps("b", "c"), snaps("a", "b"), true,
			[]fkev1.BackupRecord{rec("a", s3), rec("b", local, s3), rec("c", local)}},
		{"the store did not answer: what it held before stays", []fkev1.BackupRecord{rec("a", s3), rec("b", local, s3)}, snaps("b", "c"), nil, false,
			[]fkev1.BackupRecord{rec("a", s3), rec("b", local, s3), rec("c", local)}},
		{"the store is gone from the spec: its records go", []fkev1.BackupRecord{rec("a", s3), rec("b", local, s3)}, snaps("b"), nil, true,
			[]fkev1.BackupRecord{rec("b", local)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BackupRecords(tc.prev, tc.local, tc.remote, tc.remoteKnown)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("BackupRecords =\n%v\nwant\n%v", got, tc.want)
			}
		})
	}
}
