package controlplane

import (
	"fmt"
	"testing"
)

func TestAPIServerIPs(t *testing.T) {
	tests := []struct {
		service, node string
		want          string
		wantErr       bool
	}{
		{"10.96.0.0/16", "", "[127.0.0.1 10.96.0.1]", false},
		{"10.96.0.0/16", "172.29.0.1", "[127.0.0.1 10.96.0.1 172.29.0.1]", false},
		{"10.96.0.0/16", "not-an-ip", "", true},
		{"10.96.0.0/16", "fd00::1", "", true},
		{"nonsense", "", "", true},
	}
	for _, tt := range tests {
		got, err := APIServerIPs(tt.service, tt.node)
		if (err != nil) != tt.wantErr || (err == nil && fmt.Sprint(got) != tt.want) {
			t.Errorf("APIServerIPs(%q, %q) = %v, %v; want %s (error %v)", tt.service, tt.node, got, err, tt.want, tt.wantErr)
		}
	}
}
