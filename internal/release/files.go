package release

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
)

// epoch is every archive entry's time, so that the same binaries give the
// same tarball.
var epoch = time.Unix(0, 0).UTC()

// writeTarball writes files (paths relative to dir, slash-separated) as a
// gzip-compressed tar (at level) at dst, under the directory top, and returns each
// file's SHA-256 (hex) by its path. dst appears only once complete.
func writeTarball(ctx context.Context, dst, top, dir string, files []string, level int) (map[string]string, error) {
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tarball-*")
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", dst, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	zw, err := gzip.NewWriterLevel(tmp, level)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	// Directories first, each once, then the files in order.
	var dirs []string
	for _, f := range files {
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	slices.Sort(dirs)
	for _, d := range append([]string{""}, dirs...) {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimSuffix(top+"/"+d, "/") + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("writing %s: %w", dst, err)
		}
	}
	sums := make(map[string]string, len(files))
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sum, err := addFile(tw, top+"/"+f, filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", dst, err)
		}
		sums[f] = sum
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := finish(tmp, dst); err != nil {
		return nil, err
	}
	return sums, nil
}

// addFile writes the regular file src as name and returns its SHA-256.
func addFile(tw *tar.Writer, name, src string) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", src)
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: st.Size(), Mode: int64(st.Mode().Perm() | 0o555), ModTime: epoch, Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return "", err
	}
	sha := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tw, sha), f); err != nil {
		return "", fmt.Errorf("reading %s: %w", src, err)
	}
	return hex.EncodeToString(sha.Sum(nil)), nil
}

// finish syncs and closes tmp and renames it to dst.
func finish(tmp *os.File, dst string) error {
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return nil
}

// describe returns the artifact at p.
func describe(p string) (Artifact, error) {
	f, err := os.Open(p)
	if err != nil {
		return Artifact{}, err
	}
	defer f.Close()
	sha := sha256.New()
	n, err := io.Copy(sha, f)
	if err != nil {
		return Artifact{}, fmt.Errorf("reading %s: %w", p, err)
	}
	return Artifact{Name: filepath.Base(p), SHA256: hex.EncodeToString(sha.Sum(nil)), Size: n}, nil
}

// writeChecksums writes arts as sha256sum does ("<hex>  <name>").
func writeChecksums(dst string, arts []Artifact) error {
	var b strings.Builder
	for _, a := range arts {
		fmt.Fprintf(&b, "%s  %s\n", a.SHA256, a.Name)
	}
	return writeFile(dst, []byte(b.String()))
}

// writeFile writes data at dst, which appears only once complete.
func writeFile(dst string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".file-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return finish(tmp, dst)
}
