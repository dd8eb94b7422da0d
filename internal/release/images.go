package release

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/versions"
)

// ManagerImage is fke-manager's image in a release: the repository the
// Helm chart names, tagged with the release's version (the chart's
// appVersion, its default tag).
func ManagerImage(version string) image.SystemImage {
	si := image.Manager
	repo, _, _ := strings.Cut(si.Name, ":")
	si.Name = repo + ":" + version
	return si
}

// Images are the images of a release: fke-manager's, then the hosted
// runtime's (each supported Kubernetes version's control plane, etcd once,
// kwok and the addons).
func Images(version string) []image.SystemImage {
	out := []image.SystemImage{ManagerImage(version)}
	for i, v := range versions.Supported() {
		cp := image.ControlPlaneImages(v)
		if i > 0 {
			cp = cp[:len(cp)-1] // etcd once
		}
		out = append(out, cp...)
	}
	out = append(out, image.Kwok)
	return append(out, image.AddonImages()...)
}

// binaryOf is where si's binary sits under a platform's directory.
func binaryOf(si image.SystemImage) string {
	if si.Version != "" && si.Version != versions.Default {
		return filepath.Join(si.Version, si.Binary)
	}
	return si.Binary
}

// writeImages writes Images(version) as an OCI image layout, each image an
// index over platforms with compressed layers, tarred at dst; it returns
// how many images it wrote.
func writeImages(dst, version string, platforms []Platform, level int) (int, error) {
	dir, err := os.MkdirTemp(filepath.Dir(dst), ".images-*")
	if err != nil {
		return 0, fmt.Errorf("writing %s: %w", dst, err)
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return 0, fmt.Errorf("writing %s: %w", dst, err)
	}
	imgs := Images(version)
	for _, si := range imgs {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for _, p := range platforms {
			spec, err := si.Spec(filepath.Join(p.Dir, binaryOf(si)))
			if err != nil {
				return 0, fmt.Errorf("%s: %w", p, err)
			}
			spec.Compress, spec.Level = true, level
			img, err := image.Build(spec)
			if err != nil {
				return 0, fmt.Errorf("%s: image %s: %w", p, si.Name, err)
			}
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1, Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch},
			}})
		}
		if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{image.AnnotationRefName: si.Name})); err != nil {
			return 0, fmt.Errorf("writing image %s into %s: %w", si.Name, dst, err)
		}
	}
	if err := tarDir(dst, dir); err != nil {
		return 0, err
	}
	return len(imgs), nil
}

// tarDir writes the tree at dir as an uncompressed tar at dst (its layers
// are compressed already), entries relative to dir.
func tarDir(dst, dir string) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tar-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	tw := tar.NewWriter(tmp)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Format: tar.FormatPAX}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		h.Typeflag, h.Size, h.Mode = tar.TypeReg, st.Size(), 0o644
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return finish(tmp, dst)
}

// packageChart packages the chart at dir with version (without its v) as
// its version and version as its appVersion, into out, and returns the
// package's file name (fke-1.2.3.tgz).
func packageChart(dir, out, version string) (string, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return "", fmt.Errorf("chart %s: %w", dir, err)
	}
	ch.Metadata.Version = strings.TrimPrefix(version, "v")
	ch.Metadata.AppVersion = version
	if err := ch.Validate(); err != nil {
		return "", fmt.Errorf("chart %s: %w", dir, err)
	}
	p, err := chartutil.Save(ch, out)
	if err != nil {
		return "", fmt.Errorf("packaging chart %s: %w", dir, err)
	}
	return filepath.Base(p), nil
}
