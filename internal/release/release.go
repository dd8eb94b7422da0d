// Package release lays out a release of fke for the users of other
// machines, from binaries built beforehand (`make release` builds them):
//
//   - per platform, fke_<version>_<os>_<arch>.tar.gz: fke's binaries and
//     the upstream binaries they run, side by side as `fke` finds them (the
//     older Kubernetes minor's in its version directory), and
//     fke_<version>_<os>_<arch>.cdx.json, its CycloneDX SBOM read from each
//     binary's Go build information;
//   - fke_<version>_images.tar: an OCI image layout holding fke-manager's
//     image (the Helm chart's) and the hosted runtime's component images,
//     one multi-platform index per image;
//   - fke-<semver>.tgz: the Helm chart at the release's version;
//   - SHA256SUMS over all of these (sha256sum -c reads it).
package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/klauspost/compress/gzip"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/image"
)

// Platform is one target of a release.
type Platform struct {
	OS, Arch string
	// Dir holds the platform's binaries as `make build binaries` lays them
	// out: fke's and the upstream ones side by side, the older minor's in
	// a directory named after its version.
	Dir string
}

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// base is the name of p's artifacts, without extension.
func (p Platform) base(version string) string {
	return "fke_" + version + "_" + p.OS + "_" + p.Arch
}

// ParsePlatform parses "os/arch=dir".
func ParsePlatform(s string) (Platform, error) {
	target, dir, ok := strings.Cut(s, "=")
	osName, arch, ok2 := strings.Cut(target, "/")
	if !ok || !ok2 || dir == "" {
		return Platform{}, fmt.Errorf("platform %q: want os/arch=directory, e.g. linux/amd64=_output/bin", s)
	}
	return Platform{OS: osName, Arch: arch, Dir: dir}, nil
}

// Spec says what to release.
type Spec struct {
	// Version is a semantic version with a leading v (v1.2.3, v1.2.3-rc.1).
	Version string
	// Out is the directory the artifacts are written to; it must not
	// exist or be empty.
	Out       string
	Platforms []Platform
	// Chart is the Helm chart's directory (charts/fke).
	Chart string
	// Progress, when set, gets a line per step.
	Progress io.Writer
	// Level is the gzip level of the tarballs and the images' layers
	// (compress/gzip's levels; 0 is the default level). Tests that lay out a
	// release to run it, not to ship it, use BestSpeed.
	Level int
}

// Artifact is one file of a release.
type Artifact struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Files are the paths, relative to a platform's Dir, that its tarball
// holds: fke's binaries and the upstream ones.
func Files() []string { return append(binaries.Own(), Upstream()...) }

// Upstream are the upstream binaries a release holds: every one fke runs,
// not those only its tests run.
func Upstream() []string {
	var out []string
	for _, c := range binaries.Components() {
		if !slices.Contains(binaries.TestOnly, c) {
			out = append(out, c)
		}
	}
	return out
}

// supported are the platforms fke releases for.
var supported = []string{"linux/amd64", "linux/arm64"}

// ChecksumsFile names the checksums of a release's artifacts.
const ChecksumsFile = "SHA256SUMS"

// Make writes the release s describes into s.Out and returns its artifacts.
// Everything is checked before anything is written: a bad version, an
// unknown or repeated platform, a missing binary or one built for another
// architecture is an error that leaves s.Out as it was.
func Make(ctx context.Context, s Spec) ([]Artifact, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.Out, 0o755); err != nil {
		return nil, fmt.Errorf("release directory: %w", err)
	}
	var arts []Artifact
	add := func(name string, err error) error {
		if err != nil {
			return err
		}
		a, err := describe(filepath.Join(s.Out, name))
		if err != nil {
			return err
		}
		arts = append(arts, a)
		return nil
	}
	steps := 2*len(s.Platforms) + 2
	step := 0
	progress := func(what string, start time.Time) {
		step++
		if s.Progress != nil {
			fmt.Fprintf(s.Progress, "[%d/%d] %s (%s)\n", step, steps, what, time.Since(start).Round(100*time.Millisecond))
		}
	}
	for _, p := range s.Platforms {
		start := time.Now()
		name := p.base(s.Version) + ".tar.gz"
		sums, err := writeTarball(ctx, filepath.Join(s.Out, name), p.base(s.Version), p.Dir, Files(), s.level())
		if err := add(name, err); err != nil {
			return nil, err
		}
		progress(fmt.Sprintf("%s: %d binaries, %s", name, len(sums), size(arts[len(arts)-1].Size)), start)
		start = time.Now()
		name = p.base(s.Version) + ".cdx.json"
		if err := add(name, writeSBOM(filepath.Join(s.Out, name), s.Version, p, Files(), sums)); err != nil {
			return nil, err
		}
		progress(name+": CycloneDX SBOM", start)
	}
	start := time.Now()
	name := "fke_" + s.Version + "_images.tar"
	n, err := writeImages(filepath.Join(s.Out, name), s.Version, s.Platforms, s.level())
	if err := add(name, err); err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("%s: %d images for %d platforms, %s", name, n, len(s.Platforms), size(arts[len(arts)-1].Size)), start)
	start = time.Now()
	name, err = packageChart(s.Chart, s.Out, s.Version)
	if err := add(name, err); err != nil {
		return nil, err
	}
	progress(name+": Helm chart", start)
	if err := writeChecksums(filepath.Join(s.Out, ChecksumsFile), arts); err != nil {
		return nil, err
	}
	return arts, nil
}

func (s Spec) level() int {
	if s.Level == 0 {
		return gzip.DefaultCompression
	}
	return s.Level
}

// check validates s and every input file without writing anything.
func (s Spec) check() error {
	if !strings.HasPrefix(s.Version, "v") {
		return fmt.Errorf("version %q: want a semantic version with a leading v, e.g. v1.2.3", s.Version)
	}
	if _, err := semver.StrictNewVersion(s.Version[1:]); err != nil {
		return fmt.Errorf("version %q: want a semantic version with a leading v, e.g. v1.2.3: %w", s.Version, err)
	}
	if s.Out == "" {
		return errors.New("no output directory")
	}
	if entries, err := os.ReadDir(s.Out); err == nil && len(entries) > 0 {
		return fmt.Errorf("output directory %s is not empty: a release is written once", s.Out)
	}
	if s.Level < gzip.HuffmanOnly || s.Level > gzip.BestCompression {
		return fmt.Errorf("gzip level %d: want %d to %d", s.Level, gzip.HuffmanOnly, gzip.BestCompression)
	}
	if len(s.Platforms) == 0 {
		return errors.New("no platform: name at least one, e.g. linux/amd64=_output/bin")
	}
	seen := map[string]bool{}
	var errs []error
	for _, p := range s.Platforms {
		if !slices.Contains(supported, p.String()) {
			return fmt.Errorf("platform %s: fke releases for %s", p, strings.Join(supported, " and "))
		}
		if seen[p.String()] {
			return fmt.Errorf("platform %s named twice", p)
		}
		seen[p.String()] = true
		for _, f := range Files() {
			path := filepath.Join(p.Dir, f)
			arch, err := image.ELFArch(path)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %w", p, err))
			case arch != p.Arch:
				errs = append(errs, fmt.Errorf("%s: %s is built for %s", p, path, arch))
			}
		}
	}
	if st, err := os.Stat(filepath.Join(s.Chart, "Chart.yaml")); err != nil || st.IsDir() {
		errs = append(errs, fmt.Errorf("chart %q: no Chart.yaml there", s.Chart))
	}
	return errors.Join(errs...)
}

func size(n int64) string {
	const mib = 1 << 20
	return fmt.Sprintf("%.1f MiB", float64(n)/mib)
}
