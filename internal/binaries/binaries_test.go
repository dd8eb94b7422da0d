package binaries

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fke.dev/fke/internal/versions"
)

func TestFinder(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "fake-etcd-for-test")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(dir, "fake-noexec-for-test")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvDir, "")
	t.Setenv("PATH", t.TempDir())

	tests := []struct {
		name    string
		finder  Finder
		env     string
		binary  string
		want    string
		missing bool
	}{
		{name: "flag dir", finder: Finder{Dir: dir}, binary: "fake-etcd-for-test", want: exe},
		{name: "env dir", env: dir, binary: "fake-etcd-for-test", want: exe},
		{name: "not executable", finder: Finder{Dir: dir}, binary: "fake-noexec-for-test", missing: true},
		{name: "absent", finder: Finder{Dir: dir}, binary: "no-such-binary", missing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvDir, tt.env)
			got, err := tt.finder.Path(tt.binary)
			if tt.missing {
				var me *MissingError
				if !errors.As(err, &me) {
					t.Fatalf("want MissingError, got %v (%q)", err, got)
				}
				if !strings.Contains(err.Error(), "make binaries") || !strings.Contains(err.Error(), tt.binary) {
					t.Errorf("error does not say how to fix it: %v", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Path = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestPathsReportsEveryMissing(t *testing.T) {
	t.Setenv(EnvDir, "")
	t.Setenv("PATH", t.TempDir())
	_, err := Finder{Dir: t.TempDir()}.Paths("missing-one", "missing-two")
	if err == nil || !strings.Contains(err.Error(), "missing-one") || !strings.Contains(err.Error(), "missing-two") {
		t.Fatalf("want both names in error, got %v", err)
	}
}

func TestPathForVersion(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(Kubelet)
	write(filepath.Join(versions.Previous, Kubelet))
	write(Etcd)
	f := Finder{Dir: dir}
	cases := []struct{ version, name, want string }{
		{"", Kubelet, filepath.Join(dir, Kubelet)},
		{versions.Default, Kubelet, filepath.Join(dir, Kubelet)},
		{versions.Previous, Kubelet, filepath.Join(dir, versions.Previous, Kubelet)},
		{versions.Previous, Etcd, filepath.Join(dir, Etcd)}, // not built per version
	}
	for _, c := range cases {
		got, err := f.PathFor(c.version, c.name)
		if err != nil || got != c.want {
			t.Errorf("PathFor(%q, %s) = %q, %v; want %q", c.version, c.name, got, err, c.want)
		}
	}
	var missing *MissingError
	if _, err := f.PathFor("v1.0.0", KubeAPIServer); !errors.As(err, &missing) {
		t.Errorf("a missing versioned binary: %v, want a MissingError", err)
	}
}
