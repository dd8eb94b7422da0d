package kwok

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzRenderConfig: for any pod CIDR and node IP, renderConfig either
// refuses them with an error or renders one KwokConfiguration followed by
// the Stages, whose options hold exactly the values given (or the defaults
// for empty ones): nothing in a value can add or change a document.
func FuzzRenderConfig(f *testing.F) {
	for _, s := range [][2]string{
		{"10.88.0.0/16", "10.1.2.3"}, {"", ""}, {"fd00::/64", "::1"}, {"10.0.0.0/33", "1.2.3.4"},
		{"10.0.0.0/8\n---\nkind: Stage", "127.0.0.1"}, {"10.0.0.0/8", "127.0.0.1\nkind: x"}, {"not a cidr", "nor an ip"},
	} {
		f.Add(s[0], s[1])
	}
	all, err := stages()
	if err != nil {
		f.Fatal(err)
	}
	usage, err := usageObjects()
	if err != nil {
		f.Fatal(err)
	}
	want := len(all) + len(usage)
	f.Fuzz(func(t *testing.T, podCIDR, nodeIP string) {
		data, err := renderConfig(podCIDR, nodeIP)
		if err != nil {
			return
		}
		parts := strings.Split(string(data), "\n---\n")
		if len(parts) != 1+want {
			t.Fatalf("(%q, %q): %d documents, want %d", podCIDR, nodeIP, len(parts), 1+want)
		}
		var cfg kwokConfiguration
		if err := yaml.UnmarshalStrict([]byte(parts[0]), &cfg); err != nil {
			t.Fatalf("(%q, %q): the configuration does not parse back: %v", podCIDR, nodeIP, err)
		}
		wantCIDR, wantIP := podCIDR, nodeIP
		if wantCIDR == "" {
			wantCIDR = DefaultPodCIDR
		}
		if wantIP == "" {
			wantIP = DefaultNodeIP
		}
		if cfg.Kind != configKind || cfg.Options.CIDR != wantCIDR || cfg.Options.NodeIP != wantIP {
			t.Fatalf("(%q, %q): rendered %+v", podCIDR, nodeIP, cfg)
		}
	})
}
