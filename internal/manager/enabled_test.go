package manager

import (
	"slices"
	"strings"
	"testing"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

func TestParseRuntimes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []fkev1.ControlPlaneRuntime
		wantErr string
	}{
		{in: "local", want: []fkev1.ControlPlaneRuntime{fkev1.RuntimeLocal}},
		{in: " local , local,", want: []fkev1.ControlPlaneRuntime{fkev1.RuntimeLocal}},
		{in: "", want: []fkev1.ControlPlaneRuntime{}},
		{in: "hosted,local", want: []fkev1.ControlPlaneRuntime{fkev1.RuntimeHosted, fkev1.RuntimeLocal}},
		{in: "local,docker", wantErr: `unknown runtime "docker": fke-manager runs local, hosted`},
	} {
		got, err := ParseRuntimes(tc.in)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("ParseRuntimes(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) || got == nil {
			t.Errorf("ParseRuntimes(%q) = %#v, %v; want %#v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseProviders(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []fkev1.ProviderName
		wantErr string
	}{
		{in: "kwok,local", want: []fkev1.ProviderName{fkev1.ProviderKwok, fkev1.ProviderLocal}},
		{in: "local", want: []fkev1.ProviderName{fkev1.ProviderLocal}},
		{in: "", want: []fkev1.ProviderName{}},
		{in: "kwok,openstack", wantErr: `unknown provider "openstack": fke-manager runs kwok, local`},
	} {
		got, err := ParseProviders(tc.in)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("ParseProviders(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) || got == nil {
			t.Errorf("ParseProviders(%q) = %#v, %v; want %#v", tc.in, got, err, tc.want)
		}
	}
}

// TestDefaultsEnableEverything: the flags' defaults are what `fke up` runs,
// and they parse back to the full lists.
func TestDefaultsEnableEverything(t *testing.T) {
	rts, err := ParseRuntimes(JoinNames(Runtimes))
	if err != nil || !slices.Equal(rts, Runtimes) {
		t.Errorf("runtimes default = %v, %v", rts, err)
	}
	ps, err := ParseProviders(JoinNames(Providers))
	if err != nil || !slices.Equal(ps, Providers) {
		t.Errorf("providers default = %v, %v", ps, err)
	}
	if !enabled[fkev1.ProviderName](nil, fkev1.ProviderLocal) || enabled([]fkev1.ProviderName{}, fkev1.ProviderLocal) {
		t.Error("nil must enable every name, an empty list none")
	}
	if !strings.Contains(JoinNames(Providers), "kwok") {
		t.Error("kwok must be a provider")
	}
}
