package cli

import (
	"io"
	"slices"
	"testing"

	"fke.dev/fke/internal/manager"
	"fke.dev/fke/internal/nodejoin"
)

// A joined host's containerd uses the bootstrap file's registry, as the
// manager's local nodes do: the local provider then trusts and mirrors it
// and pulls the sandbox image there unless the environment names another.
func TestJoinOptionsUseTheRegistry(t *testing.T) {
	g := &globals{dataDir: t.TempDir(), out: io.Discard, errOut: io.Discard}
	bf := nodejoin.BootstrapFile{Registry: "172.29.0.1:41235"}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	opts := joinOptions(g, bf, nil, getenv)
	if opts.Registry != bf.Registry || opts.PauseImage != "" || opts.DataDir != g.dataDir {
		t.Errorf("options = registry %q, pause image %q, data dir %q; want the file's registry and no pause image", opts.Registry, opts.PauseImage, opts.DataDir)
	}
	env[manager.EnvNodePauseImage] = "fke.local/pause:test"
	env[manager.EnvNodeImages] = "/a.tar,/b.tar"
	opts = joinOptions(g, bf, nil, getenv)
	if opts.PauseImage != "fke.local/pause:test" || !slices.Equal(opts.Images, []string{"/a.tar", "/b.tar"}) || opts.Registry != bf.Registry {
		t.Errorf("options = %+v, want the environment's pause image and images beside the registry", opts)
	}
}
