package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/test/testenv"
)

// needRegistry skips (fails under CI) when the registry binary is not built.
func needRegistry(t *testing.T) {
	t.Helper()
	if _, err := (binaries.Finder{Dir: testenv.BinDir(t)}).Path(binaries.Registry); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("registry binary missing under CI: %v", err)
		}
		t.Skipf("registry not built (run `make binaries`): %v", err)
	}
}

// TestRegistryServesPushedImages pushes an image built by internal/image to
// the registry `fke up` runs, lists it and reads its manifest back.
func TestRegistryServesPushedImages(t *testing.T) {
	needRegistry(t)
	e := testenv.Up(t)
	st := e.State()
	if !strings.HasPrefix(st.Registry, "127.0.0.1:") {
		t.Fatalf("state.json registry = %q (%s), want a loopback address", st.Registry, st.RegistryError)
	}
	if out := e.MustRun("status"); !strings.Contains(out, "Registry:   "+st.Registry) || !strings.Contains(out, "registry") {
		t.Fatalf("fke status does not show the registry:\n%s", out)
	}
	storage := filepath.Join(e.DataDir, "registry")

	img, err := image.Build(image.Spec{
		Files:      []image.File{{Path: "/hello.txt", Data: []byte("hello")}},
		Entrypoint: []string{"/bin/true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "hello.tar")
	tag, _ := name.NewTag("example.com/team/hello:v1")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	// A docker archive holds a Docker manifest: its digest is the one pushed.
	loaded, err := image.Load(archive)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := loaded[0].Image.Digest()
	builtLayers, _ := img.Layers()
	wantDiff, _ := builtLayers[0].DiffID()
	out := e.MustRun("image", "push", archive)
	if !strings.Contains(out, st.Registry+"/team/hello:v1") {
		t.Fatalf("push output:\n%s", out)
	}
	if out := e.MustRun("image", "list"); !strings.Contains(out, st.Registry+"/team/hello:v1") || !strings.Contains(out, want.String()) {
		t.Fatalf("fke image list lacks the pushed image %s:\n%s", want, out)
	}
	reg := image.Registry{Host: st.Registry}
	raw, desc, err := reg.Manifest(context.Background(), "team/hello:v1")
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want {
		t.Fatalf("registry serves %s, pushed %s", desc.Digest, want)
	}
	m, err := v1.ParseManifest(strings.NewReader(string(raw)))
	if err != nil || len(m.Layers) != 1 {
		t.Fatalf("manifest %s: %v", raw, err)
	}
	// The pulled image holds the layer that was built (same content).
	pulled, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := pulled.ConfigFile()
	if err != nil || len(cf.RootFS.DiffIDs) != 1 || cf.RootFS.DiffIDs[0] != wantDiff {
		t.Fatalf("pulled config %+v, %v; want the built layer %s", cf, err, wantDiff)
	}
	if _, err := os.Stat(storage); err != nil {
		t.Fatalf("registry storage not under the data directory: %v", err)
	}

	// An OCI layout keeps the built image as it is: same digest in the registry.
	oci := filepath.Join(t.TempDir(), "oci")
	lp, err := layout.Write(oci, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	e.MustRun("image", "push", oci, "--name", "team/oci:v2")
	built, _ := img.Digest()
	if d, ok, err := reg.Head(context.Background(), "team/oci:v2"); err != nil || !ok || d.Digest != built {
		t.Fatalf("OCI layout push: %v %v %v, want %s", d, ok, err, built)
	}

	// Bad input changes nothing.
	if out := e.RunFail("image", "push", filepath.Join(t.TempDir(), "missing.tar")); !strings.Contains(out, "no such file") {
		t.Fatalf("pushing a missing file:\n%s", out)
	}

	// fke up pushes its own images in the background.
	testenv.Eventually(t, 2*time.Minute, "pause image in the registry", func() error {
		_, ok, err := reg.Head(context.Background(), image.Pause.Name)
		if err == nil && !ok {
			return os.ErrNotExist
		}
		return err
	})
}
