// Package image builds container images without Docker and moves them in
// and out of fke's OCI registry (github.com/google/go-containerregistry).
// Images fke builds are reproducible (fixed timestamps and owners, sorted
// entries) and use uncompressed OCI layers: the registry is on this machine,
// so gzip would cost CPU on every build and pull and save nothing.
package image

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of an image's filesystem.
type File struct {
	// Path is absolute inside the image, e.g. /usr/bin/coredns.
	Path string
	// Mode is the permission bits; 0 means 0644 (0755 is typical for binaries).
	Mode int64
	// Data is the content of a regular file.
	Data []byte
	// Link, when set, makes Path a symbolic link to Link (Data is ignored).
	Link string
}

// Spec describes an image: one layer holding Files, and its runtime config.
type Spec struct {
	Files      []File
	Entrypoint []string
	Cmd        []string
	// Env entries are KEY=value.
	Env        []string
	User       string
	WorkingDir string
	Labels     map[string]string
	// ExposedPorts are like "8080/tcp".
	ExposedPorts []string
	// Arch is the image's GOARCH; empty: this machine's.
	Arch string
	// Compress stores the layer gzip-compressed, for images that travel
	// (a release's OCI layout) rather than to fke's registry on this machine.
	Compress bool
	// Level is the gzip level of a compressed layer (0: the default).
	Level int
}

// epoch is the timestamp of every file and of the image, so that building
// the same files twice gives the same digest.
var epoch = time.Unix(0, 0).UTC()

// Build returns the image of s for linux on s.Arch (default: this machine's).
// Parent directories of every file are created (0755). It fails when a path
// is relative or appears twice.
func Build(s Spec) (v1.Image, error) {
	layer, err := layerTar(s.Files)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	var l v1.Layer = static.NewLayer(layer, types.OCIUncompressedLayer)
	mt := types.OCIUncompressedLayer
	if s.Compress {
		mt = types.OCILayer
		l, err = tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil },
			tarball.WithMediaType(mt), tarball.WithCompressedCaching, tarball.WithCompressionLevel(cmp.Or(s.Level, gzip.DefaultCompression)))
		if err != nil {
			return nil, fmt.Errorf("building image: %w", err)
		}
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     l,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "fke image build"},
		MediaType: mt,
	})
	if err != nil {
		return nil, fmt.Errorf("building image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("building image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", cmp.Or(s.Arch, runtime.GOARCH)
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: s.Entrypoint, Cmd: s.Cmd, Env: s.Env, User: s.User, WorkingDir: s.WorkingDir, Labels: s.Labels,
	}
	if len(s.ExposedPorts) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range s.ExposedPorts {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("building image: %w", err)
	}
	return img, nil
}

// layerTar writes files, and the directories above them, as a reproducible tar.
func layerTar(files []File) ([]byte, error) {
	entries := map[string]File{}
	dirs := map[string]bool{}
	for _, f := range files {
		p := path.Clean(f.Path)
		if !path.IsAbs(f.Path) || p == "/" {
			return nil, fmt.Errorf("image file %q: path must be absolute and name a file", f.Path)
		}
		rel := strings.TrimPrefix(p, "/")
		if _, dup := entries[rel]; dup {
			return nil, fmt.Errorf("image file %s appears twice", p)
		}
		entries[rel] = f
		for d := path.Dir(rel); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	names := make([]string, 0, len(entries)+len(dirs))
	for d := range dirs {
		if _, ok := entries[d]; ok {
			return nil, fmt.Errorf("image path /%s is both a file and a directory", d)
		}
		names = append(names, d)
	}
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := &tar.Header{Name: n, ModTime: epoch, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
		f, isFile := entries[n]
		switch {
		case !isFile:
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, n+"/", 0o755
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size, h.Mode = tar.TypeReg, int64(len(f.Data)), f.Mode
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("writing layer: %w", err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, fmt.Errorf("writing layer: %w", err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing layer: %w", err)
	}
	return buf.Bytes(), nil
}
