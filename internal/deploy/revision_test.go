package deploy

import (
	"slices"
	"strings"
	"testing"
)

func revs(spec ...string) []Revision {
	// spec: "1:superseded"
	var out []Revision
	for _, s := range spec {
		num, st, _ := strings.Cut(s, ":")
		n := 0
		for _, c := range num {
			n = n*10 + int(c-'0')
		}
		out = append(out, Revision{Release: "web", Number: n, Status: RevisionStatus(st)})
	}
	return out
}

func TestNextRevision(t *testing.T) {
	if n := NextRevision(nil); n != 1 {
		t.Errorf("first revision %d, want 1", n)
	}
	if n := NextRevision(revs("3:superseded", "7:deployed", "5:failed")); n != 8 {
		t.Errorf("next %d, want 8", n)
	}
}

func TestRollbackTarget(t *testing.T) {
	tests := []struct {
		name    string
		revs    []Revision
		to      int
		want    int
		wantErr string
	}{
		{name: "after a failed revision, the last good one", revs: revs("1:superseded", "2:deployed", "3:failed"), want: 2},
		{name: "after a good revision, the good one before it", revs: revs("1:superseded", "2:superseded", "3:deployed"), want: 2},
		{name: "failed ones are skipped", revs: revs("1:deployed", "2:failed", "3:failed"), want: 1},
		{name: "unordered input", revs: revs("3:failed", "1:superseded", "2:deployed"), want: 2},
		{name: "an explicit revision, even a failed one", revs: revs("1:superseded", "2:failed", "3:deployed"), to: 2, want: 2},
		{name: "an explicit revision that does not exist", revs: revs("1:superseded", "2:deployed"), to: 9, wantErr: "revision 9 not found: release web has revisions 1, 2"},
		{name: "nothing healthy before", revs: revs("1:failed", "2:failed"), wantErr: "no healthy revision before 2"},
		{name: "only one revision", revs: revs("1:deployed"), wantErr: "no healthy revision before 1"},
		{name: "no revisions", wantErr: "no revisions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RollbackTarget(tt.revs, tt.to)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Number != tt.want {
				t.Fatalf("target %d (%v), want %d", got.Number, err, tt.want)
			}
		})
	}
}

func TestStatusChanges(t *testing.T) {
	all := revs("1:superseded", "2:deployed", "3:pending")
	if got := StatusChanges(all, 3, StatusDeployed); len(got) != 1 || got[2] != StatusSuperseded {
		t.Errorf("deployed 3: changes %v, want 2 superseded", got)
	}
	if got := StatusChanges(all, 3, StatusFailed); len(got) != 0 {
		t.Errorf("failed 3: changes %v, want none (2 stays deployed)", got)
	}
}

func TestExpired(t *testing.T) {
	tests := []struct {
		name string
		revs []Revision
		keep int
		want []int
	}{
		{name: "within the limit", revs: revs("1:superseded", "2:deployed"), keep: 3},
		{name: "oldest first", revs: revs("1:superseded", "2:superseded", "3:superseded", "4:deployed"), keep: 2, want: []int{1, 2}},
		{name: "the deployed revision stays behind failed ones", revs: revs("1:deployed", "2:failed", "3:failed", "4:failed"), keep: 2, want: []int{2, 3}},
		{name: "no limit", revs: revs("1:superseded", "2:deployed"), keep: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Expired(tt.revs, tt.keep); !slices.Equal(got, tt.want) {
				t.Fatalf("expired %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHasHealthy(t *testing.T) {
	tests := []struct {
		name string
		revs []Revision
		want bool
	}{
		{"no revisions", nil, false},
		{"a failed first deploy", []Revision{{Number: 1, Status: StatusFailed}}, false},
		{"two failed, one pending", []Revision{{Number: 1, Status: StatusFailed}, {Number: 2, Status: StatusFailed}, {Number: 3, Status: StatusPending}}, false},
		{"one deployed", []Revision{{Number: 1, Status: StatusDeployed}, {Number: 2, Status: StatusFailed}}, true},
		{"superseded counts", []Revision{{Number: 1, Status: StatusSuperseded}, {Number: 2, Status: StatusFailed}}, true},
	}
	for _, tt := range tests {
		if got := HasHealthy(tt.revs); got != tt.want {
			t.Errorf("%s: HasHealthy = %v, want %v", tt.name, got, tt.want)
		}
	}
}
