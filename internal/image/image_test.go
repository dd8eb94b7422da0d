package image_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"fke.dev/fke/internal/image"
)

func files(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

func TestBuildIsReproducible(t *testing.T) {
	spec := image.Spec{
		Files: []image.File{
			{Path: "/usr/bin/app", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
			{Path: "/etc/app.conf", Data: []byte("x=1\n")},
			{Path: "/usr/bin/app2", Link: "app"},
		},
		Entrypoint: []string{"/usr/bin/app"}, Env: []string{"A=b"}, User: "65534", ExposedPorts: []string{"8080/tcp"},
	}
	a, err := image.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := image.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("same spec, different digests %s and %s", da, db)
	}
	cf, err := a.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !slices.Equal(cf.Config.Entrypoint, []string{"/usr/bin/app"}) ||
		cf.Config.User != "65534" || len(cf.Config.ExposedPorts) != 1 || len(cf.RootFS.DiffIDs) != 1 {
		t.Fatalf("config = %+v", cf)
	}
	got := files(t, a)
	for name, mode := range map[string]int64{"etc/": 0o755, "usr/": 0o755, "usr/bin/": 0o755, "usr/bin/app": 0o755, "etc/app.conf": 0o644} {
		if h, ok := got[name]; !ok || h.Mode != mode || h.Uid != 0 || !h.ModTime.Equal(got["etc/"].ModTime) {
			t.Errorf("entry %s = %+v, want mode %o", name, h, mode)
		}
	}
	if h := got["usr/bin/app2"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "app" {
		t.Errorf("symlink = %+v", h)
	}
	m, _ := a.Manifest()
	if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar" {
		t.Errorf("manifest media types %s / %s", m.MediaType, m.Layers[0].MediaType)
	}

	for _, bad := range [][]image.File{
		{{Path: "relative"}},
		{{Path: "/a"}, {Path: "/a"}},
		{{Path: "/a"}, {Path: "/a/b"}},
	} {
		if _, err := image.Build(image.Spec{Files: bad}); err == nil {
			t.Errorf("Build(%v) succeeded, want an error", bad)
		}
	}
}

// TestBinaryRunsFromItsImage unpacks the image of a dynamically linked
// program and runs it chrooted there: the image holds everything it needs.
func TestBinaryRunsFromItsImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Skip("no echo binary")
	}
	fs, err := image.BinaryFiles(echo, "/bin/echo")
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) < 2 {
		t.Fatalf("%s yielded %d files; want the binary, its loader and libc", echo, len(fs))
	}
	img, err := image.Build(image.Spec{Files: fs, Entrypoint: []string{"/bin/echo"}})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	layers, _ := img.Layers()
	rc, _ := layers[0].Uncompressed()
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			data, _ := io.ReadAll(tr)
			if err := os.WriteFile(p, data, os.FileMode(h.Mode)); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := exec.Command("chroot", root, "/bin/echo", "hello from the image").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hello from the image" {
		t.Fatalf("running the unpacked image: %v\n%s", err, out)
	}
}

func TestLoadDockerArchiveAndOCILayout(t *testing.T) {
	img, err := image.Build(image.Spec{Files: []image.File{{Path: "/hello", Data: []byte("hi")}}})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	dir := t.TempDir()

	archive := filepath.Join(dir, "app.tar")
	tag, _ := name.NewTag("docker.io/team/app:v2")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	got, err := image.Load(archive)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "team/app:v2" || got[0].Image == nil {
		t.Fatalf("docker archive loaded as %+v", got)
	}

	oci := filepath.Join(dir, "oci")
	p, err := layout.Write(oci, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{image.AnnotationRefName: "v3"})); err != nil {
		t.Fatal(err)
	}
	got, err = image.Load(oci)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != ":v3" {
		t.Fatalf("OCI layout loaded as %+v", got)
	}
	if d, _ := got[0].Image.Digest(); d != want {
		t.Fatalf("digest %s, want %s", d, want)
	}
	if _, err := got[0].Named(""); err == nil || !strings.Contains(err.Error(), "--name") {
		t.Fatalf("a bare tag must ask for --name, got %v", err)
	}
	if n, err := got[0].Named("team/app"); err != nil || n != "team/app:v3" {
		t.Fatalf("Named(team/app) = %q, %v", n, err)
	}
	if n, err := got[0].Named("team/app:v9"); err != nil || n != "team/app:v9" {
		t.Fatalf("Named(team/app:v9) = %q, %v", n, err)
	}

	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, bytes.Repeat([]byte("x"), 2000), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{junk, filepath.Join(dir, "missing"), t.TempDir()} {
		if _, err := image.Load(bad); err == nil {
			t.Errorf("Load(%s) succeeded, want an error", bad)
		}
	}
}
