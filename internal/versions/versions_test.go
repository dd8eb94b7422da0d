package versions

import (
	"strings"
	"testing"
)

func TestDefaultIsSupported(t *testing.T) {
	t.Parallel()
	if err := CheckRunnable(Default); err != nil {
		t.Fatalf("the default version is not runnable: %v", err)
	}
	for _, v := range Supported() {
		if _, err := Parse(v); err != nil {
			t.Errorf("supported version %s: %v", v, err)
		}
	}
}

func TestCheckRunnable(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"v1.99.0", "v1.37.1", "1.37.2", ""} {
		err := CheckRunnable(v)
		if err == nil {
			t.Errorf("%q accepted", v)
			continue
		}
		if !strings.Contains(err.Error(), Default) || !strings.Contains(err.Error(), "fke versions") {
			t.Errorf("%q: message %q does not list the runnable versions", v, err)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	good := map[string]Version{"v1.37.2": {1, 37, 2}, "v1.0.0": {1, 0, 0}, "v2.10.11": {2, 10, 11}}
	for s, want := range good {
		got, err := Parse(s)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", s, got, err, want)
		}
		if got.String() != s {
			t.Errorf("String() = %q, want %q", got.String(), s)
		}
	}
	for _, s := range []string{"", "v", "1.37.2", "v1.37", "v1.37.2.1", "v1.37.x", "v1.-1.0", "v1.037.0", "v1.37.2-rc.0", "v1.+3.0"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) succeeded", s)
		}
	}
}

func TestCheckUpgrade(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from, to string
		want     string // "" = allowed
	}{
		{"v1.37.2", "v1.37.2", ""},
		{"v1.37.2", "v1.37.5", ""},
		{"v1.36.3", "v1.37.2", ""},
		{"v1.36.3", "v1.37.0", ""},
		{"v1.37.2", "v1.37.1", "downgrades are not supported"},
		{"v1.37.2", "v1.36.3", "downgrades are not supported"},
		{"v1.35.0", "v1.37.2", "one minor version at a time (to v1.36.x first)"},
		{"v1.37.2", "v2.0.0", "one minor version at a time"},
		{"v1.37.2", "latest", "vMAJOR.MINOR.PATCH"},
	}
	for _, tt := range tests {
		err := CheckUpgrade(tt.from, tt.to)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s -> %s refused: %v", tt.from, tt.to, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s -> %s: got %v, want an error containing %q", tt.from, tt.to, err, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"v1.37.2", "v0.0.0", "v1.37", "1.2.3", "v01.2.3", "v1.2.3-rc.1", "v9999999999999999999.0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			return
		}
		// Round trip: a parsed version prints as it was written.
		if v.String() != s {
			t.Fatalf("Parse(%q).String() = %q", s, v.String())
		}
	})
}

func TestUpgradeTargets(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		Previous:  {Default},
		Default:   nil,
		"v1.35.9": {Previous},
		"v1.36.0": {Previous, Default},
		"bad":     nil,
	}
	for from, want := range cases {
		got := UpgradeTargets(from)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("UpgradeTargets(%s) = %v, want %v", from, got, want)
		}
	}
}

func TestCheckKubeletSkew(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cp, node string
		ok       bool
	}{
		{"v1.37.2", "v1.37.2", true},
		{"v1.37.2", "v1.36.3", true},
		{"v1.37.2", "v1.34.0", true},
		{"v1.37.2", "v1.33.9", false},
		{"v1.36.3", "v1.37.2", false},
		{"v1.37.0", "v1.37.2", true}, // patch skew is allowed
		{"v1.37.2", "v2.37.2", false},
	}
	for _, c := range cases {
		err := CheckKubeletSkew(c.cp, c.node)
		if (err == nil) != c.ok {
			t.Errorf("CheckKubeletSkew(%s, %s) = %v, want ok=%v", c.cp, c.node, err, c.ok)
		}
	}
}
