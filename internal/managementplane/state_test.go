package managementplane

import "testing"

func TestParseVmRSS(t *testing.T) {
	for _, tt := range []struct {
		status string
		want   int64
		ok     bool
	}{
		{"Name:\tetcd\nVmPeak:\t 2000 kB\nVmRSS:\t   48212 kB\nRssAnon:\t 30000 kB\n", 48212 << 10, true},
		{"Name:\tkthreadd\nState:\tS (sleeping)\n", 0, false},
		{"VmRSS:\t  12 MB\n", 0, false},
	} {
		got, ok := parseVmRSS(tt.status)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseVmRSS(%q) = %d, %v; want %d, %v", tt.status, got, ok, tt.want, tt.ok)
		}
	}
}
