package local

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRaiseLimits(t *testing.T) {
	for _, tc := range []struct {
		name        string
		have        string // "" when the key is missing
		want        int64
		wantValue   string
		wantChanged bool
		wantErr     string
	}{
		{name: "lower is raised", have: "128\n", want: 8192, wantValue: "8192", wantChanged: true},
		{name: "equal is kept", have: "8192\n", want: 8192, wantValue: "8192\n"},
		{name: "higher is kept", have: "65536\n", want: 8192, wantValue: "65536\n"},
		{name: "missing key", want: 8192, wantErr: "reading fs.inotify.max_user_instances"},
		{name: "garbage", have: "lots\n", want: 8192, wantValue: "lots\n", wantErr: `"lots" is not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			key := "fs/inotify/max_user_instances"
			path := filepath.Join(root, key)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.have != "" {
				if err := os.WriteFile(path, []byte(tc.have), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			changed, err := RaiseLimits(root, map[string]int64{key: tc.want})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := slices.ContainsFunc(changed, func(c string) bool { return strings.HasPrefix(c, "fs.inotify.max_user_instances=") }); got != tc.wantChanged {
				t.Errorf("changed %v, want a change: %v", changed, tc.wantChanged)
			}
			if tc.have == "" {
				return
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tc.wantValue {
				t.Errorf("value %q, want %q", data, tc.wantValue)
			}
		})
	}
}
