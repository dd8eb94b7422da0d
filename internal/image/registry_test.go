package image_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/image"
)

// TestPushListHead runs against go-containerregistry's in-memory registry;
// test/integration runs the same against the registry `fke up` starts.
func TestPushListHead(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	reg := image.Registry{Host: strings.TrimPrefix(srv.URL, "http://")}
	ctx := context.Background()
	img, err := image.Build(image.Spec{Files: []image.File{{Path: "/x", Data: []byte("x")}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := reg.Push(ctx, "team/app:v1", img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Push(ctx, "team/app:v1", img); err != nil {
		t.Fatalf("pushing again: %v", err)
	}
	desc, ok, err := reg.Head(ctx, "team/app:v1")
	if err != nil || !ok || desc.Digest != d {
		t.Fatalf("Head = %v, %v, %v; want %s", desc, ok, err, d)
	}
	if _, ok, err := reg.Head(ctx, "team/app:v2"); err != nil || ok {
		t.Fatalf("Head of a missing tag = %v, %v", ok, err)
	}
	list, err := reg.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Repository != "team/app" || list[0].Tag != "v1" || list[0].Digest != d || list[0].Size == 0 {
		t.Fatalf("List = %+v", list)
	}
	if _, err := reg.Push(ctx, "Bad Name", img); err == nil {
		t.Fatal("pushing under a bad name succeeded")
	}
	if _, err := (image.Registry{}).List(ctx); err == nil || !strings.Contains(err.Error(), "fke up") {
		t.Fatalf("no registry: %v", err)
	}
}

func TestEnsureSystemImages(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	reg := image.Registry{Host: strings.TrimPrefix(srv.URL, "http://")}
	dir := t.TempDir()
	// Binaries are looked up in $FKE_BIN_DIR and $PATH too (`make test`
	// sets the former to the built ones): only dir may answer here.
	t.Setenv(binaries.EnvDir, dir)
	t.Setenv("PATH", dir)
	// A static stand-in for the pause binary; the others are missing.
	if err := os.WriteFile(filepath.Join(dir, binaries.Pause), staticELF(t), 0o755); err != nil {
		t.Fatal(err)
	}
	pushed, err := image.EnsureSystemImages(context.Background(), reg, binaries.Finder{Dir: dir}, nil, image.Pause, image.DemoServer)
	if len(pushed) != 1 || pushed[0].Name != image.Pause.Name {
		t.Fatalf("pushed %+v", pushed)
	}
	var missing *binaries.MissingError
	if !errors.As(err, &missing) || missing.Name != binaries.DemoServer || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("error = %v, want the demo server missing with a hint", err)
	}
	if got := image.Pause.Ref("172.29.0.1:5000"); got != "172.29.0.1:5000/fke/pause:1.0" {
		t.Fatalf("Ref = %s", got)
	}
}

// staticELF returns the test binary (a valid ELF executable; its
// libraries, if any, are found on this machine).
func staticELF(t *testing.T) []byte {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	files, err := image.BinaryFiles(exe, "/x")
	if err != nil {
		t.Fatal(err)
	}
	return files[0].Data
}

// TestManagerImage: fke-manager's image runs the manager as the non-root
// user the Helm chart asks for, and `fke up` does not build it.
func TestManagerImage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), binaries.Manager)
	if err := os.WriteFile(bin, staticELF(t), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := image.Manager.Build(bin)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.Entrypoint; len(got) != 1 || got[0] != "/usr/bin/fke-manager" {
		t.Errorf("entrypoint = %q", got)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user = %q, want the chart's runAsUser 65532", cf.Config.User)
	}
	for _, si := range image.SystemImages {
		if si.Name == image.Manager.Name {
			t.Error("fke up would build the manager's image on every start")
		}
	}
}
