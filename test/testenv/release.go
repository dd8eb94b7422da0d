package testenv

import (
	"compress/gzip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"fke.dev/fke/internal/release"
)

// Release is a release of fke laid out for a test and unpacked as a user
// of another machine would.
type Release struct {
	Version string
	// Dir holds the artifacts (release.Make's output).
	Dir string
	// Bin is the platform tarball, extracted: fke beside every binary it runs.
	Bin string
	// Images is the OCI image layout of the images tar, extracted.
	Images string
	// Chart is the packaged Helm chart.
	Chart string
}

// MakeRelease lays out a release at version for this machine from the
// binaries the tests run, building nothing: fke's own from FkeBinary's
// directory and the binary directory (fke-manager, fke-gpu-agent: `make
// build`), the upstream ones from the binary directory; from names a
// binary's path instead (e.g. a static fke-manager). It unpacks the
// tarball and the images tar with tar(1).
func MakeRelease(t testing.TB, version string, from map[string]string) *Release {
	t.Helper()
	bin := BinDir(t)
	fkeDir := filepath.Dir(FkeBinary(t))
	built, _ := os.ReadDir(fkeDir)
	src := t.TempDir()
	for _, f := range release.Files() {
		p, ok := from[f]
		if !ok {
			p = filepath.Join(bin, f)
			if slices.ContainsFunc(built, func(d os.DirEntry) bool { return d.Name() == f }) {
				p = filepath.Join(fkeDir, f)
			}
		}
		dst := filepath.Join(src, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, dst); err != nil {
			t.Fatal(err)
		}
	}
	r := &Release{Version: version, Dir: filepath.Join(t.TempDir(), version)}
	p := release.Platform{OS: "linux", Arch: runtime.GOARCH, Dir: src}
	arts, err := release.Make(context.Background(), release.Spec{Version: version, Out: r.Dir, Platforms: []release.Platform{p},
		Chart: filepath.Join(RepoRoot(), "charts", "fke"), Level: gzip.BestSpeed})
	if err != nil {
		t.Fatalf("make release: %v", err)
	}
	for _, a := range arts {
		t.Logf("release artifact %s: %.1f MiB", a.Name, float64(a.Size)/(1<<20))
	}
	// As a user checks a download.
	sums := exec.Command("sha256sum", "--check", "--strict", release.ChecksumsFile)
	sums.Dir = r.Dir
	if out, err := sums.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum --check %s: %v\n%s", release.ChecksumsFile, err, out)
	}
	unpacked := t.TempDir()
	untar(t, filepath.Join(r.Dir, "fke_"+version+"_linux_"+runtime.GOARCH+".tar.gz"), unpacked)
	r.Bin = filepath.Join(unpacked, "fke_"+version+"_linux_"+runtime.GOARCH)
	r.Images = t.TempDir()
	untar(t, filepath.Join(r.Dir, "fke_"+version+"_images.tar"), r.Images)
	r.Chart = filepath.Join(r.Dir, "fke-"+version[1:]+".tgz")
	return r
}

func untar(t testing.TB, archive, dir string) {
	t.Helper()
	if out, err := exec.Command("tar", "-xf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar -xf %s: %v\n%s", archive, err, out)
	}
}
