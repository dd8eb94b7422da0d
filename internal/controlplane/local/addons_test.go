package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/supervisor"
)

// addonRuntime is a Runtime whose binaries directory holds "sleeper", a
// script that writes its arguments to a file beside it and sleeps.
func addonRuntime(t *testing.T) *Runtime {
	t.Helper()
	bin := t.TempDir()
	script := "#!/bin/sh\necho \"$@\" > \"$1/args\"\nexec sleep 60\n"
	if err := os.WriteFile(filepath.Join(bin, "sleeper"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := newTestRuntime(t)
	r.finder = binaries.Finder{Dir: bin}
	r.running["default/demo"] = controlplane.Spec{Key: "default/demo"}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.StopAll(ctx)
	})
	return r
}

func sleeper(args ...string) controlplane.Addon {
	return controlplane.Addon{Name: "sleeper", Binary: "sleeper", Files: map[string][]byte{"conf": []byte("a")},
		Args: append([]string{controlplane.AddonDirVar}, args...)}
}

func addonPID(t *testing.T, st controlplane.Status) int {
	t.Helper()
	a, ok := st.AddonStatus("sleeper")
	if !ok || !a.Running {
		t.Fatalf("addon not running: %+v", st.Addons)
	}
	return a.PID
}

// TestEnsureAddons: an addon process starts with its files in its
// directory, is left alone while its spec stays, restarts when it changes,
// and goes (files too) when no longer asked for; Stop ends addons with the
// control plane.
func TestEnsureAddons(t *testing.T) {
	r := addonRuntime(t)
	ctx := t.Context()
	dir := filepath.Join(r.DataDir("default/demo"), "addons", "sleeper")

	st, err := r.EnsureAddons(ctx, "default/demo", []controlplane.Addon{sleeper("x")})
	if err != nil {
		t.Fatal(err)
	}
	pid := addonPID(t, st)
	if data, err := os.ReadFile(filepath.Join(dir, "conf")); err != nil || string(data) != "a" {
		t.Errorf("file conf: %q, %v", data, err)
	}
	waitFile(t, filepath.Join(dir, "args"), dir+" x")
	if info, err := os.Stat(filepath.Join(dir, "conf")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("conf mode %v, %v", info, err)
	}

	st, err = r.EnsureAddons(ctx, "default/demo", []controlplane.Addon{sleeper("x")})
	if err != nil || addonPID(t, st) != pid {
		t.Errorf("same spec: restarted (%v)", err)
	}
	st, err = r.EnsureAddons(ctx, "default/demo", []controlplane.Addon{sleeper("y")})
	if err != nil {
		t.Fatal(err)
	}
	if addonPID(t, st) == pid {
		t.Error("changed args: not restarted")
	}
	waitFile(t, filepath.Join(dir, "args"), dir+" y")

	st, err = r.EnsureAddons(ctx, "default/demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Addons) != 0 || r.group.Get(addonProcessName("default/demo", "sleeper")).State() != supervisor.Stopped {
		t.Errorf("removed addon still reported or running: %+v", st.Addons)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory of the removed addon left: %v", err)
	}

	if _, err := r.EnsureAddons(ctx, "default/demo", []controlplane.Addon{sleeper("z")}); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(ctx, "default/demo"); err != nil {
		t.Fatal(err)
	}
	if p := r.group.Get(addonProcessName("default/demo", "sleeper")); p.State() != supervisor.Stopped {
		t.Errorf("Stop left the addon %s", p.State())
	}
	if _, err := r.EnsureAddons(ctx, "default/demo", []controlplane.Addon{sleeper("z")}); err == nil {
		t.Error("EnsureAddons of a stopped control plane: want an error")
	}
}

func TestEnsureAddonsMissingBinary(t *testing.T) {
	r := addonRuntime(t)
	a := sleeper()
	a.Binary = "no-such-addon"
	st, err := r.EnsureAddons(t.Context(), "default/demo", []controlplane.Addon{a})
	if err == nil || !strings.Contains(err.Error(), "no-such-addon not found") {
		t.Errorf("got %v, want the binary named", err)
	}
	if _, ok := st.AddonStatus("sleeper"); ok {
		t.Error("an addon that could not start is reported")
	}
}

func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		if strings.TrimSpace(string(data)) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q, want %q", path, data, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
