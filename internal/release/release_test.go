package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"helm.sh/helm/v3/pkg/chart/loader"

	"fke.dev/fke/internal/image"
)

// tinyBinary builds a static Go program for this machine (it has the
// build information SBOMs are read from) and returns its path.
func tinyBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/tiny\n\ngo 1.24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", "tiny", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building a test binary: %v\n%s", err, out)
	}
	return filepath.Join(dir, "tiny")
}

// platformDir lays out every file of a release as a copy of bin.
func platformDir(t *testing.T, bin string) string {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range Files() {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func chartDir() string { return filepath.Join("..", "..", "charts", "fke") }

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestMakeLaysOutARelease(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("releases are for amd64 and arm64, not %s", runtime.GOARCH)
	}
	bin := tinyBinary(t)
	binData, _ := os.ReadFile(bin)
	p := Platform{OS: "linux", Arch: runtime.GOARCH, Dir: platformDir(t, bin)}
	out := filepath.Join(t.TempDir(), "v1.2.3")
	var progress bytes.Buffer
	arts, err := Make(context.Background(), Spec{Version: "v1.2.3", Out: out, Platforms: []Platform{p}, Chart: chartDir(), Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	base := "fke_v1.2.3_linux_" + runtime.GOARCH
	var names []string
	for _, a := range arts {
		names = append(names, a.Name)
	}
	want := []string{base + ".tar.gz", base + ".cdx.json", "fke_v1.2.3_images.tar", "fke-1.2.3.tgz"}
	if !slices.Equal(names, want) {
		t.Fatalf("artifacts %v, want %v", names, want)
	}
	if strings.Count(progress.String(), "\n") != len(want) {
		t.Errorf("progress has a line per step, got:\n%s", &progress)
	}

	// SHA256SUMS names every artifact with its sum.
	sums, err := os.ReadFile(filepath.Join(out, ChecksumsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range arts {
		data, err := os.ReadFile(filepath.Join(out, a.Name))
		if err != nil {
			t.Fatal(err)
		}
		if line := sha(data) + "  " + a.Name + "\n"; !strings.Contains(string(sums), line) {
			t.Errorf("%s lacks %q:\n%s", ChecksumsFile, line, sums)
		}
	}

	// The tarball holds every binary, executable, under one directory.
	entries := readTarGz(t, filepath.Join(out, base+".tar.gz"))
	for _, f := range Files() {
		h, ok := entries[base+"/"+f]
		if !ok {
			t.Errorf("tarball lacks %s/%s", base, f)
			continue
		}
		if h.mode&0o111 == 0 || sha(h.data) != sha(binData) {
			t.Errorf("%s: mode %o, content differs: %v", f, h.mode, sha(h.data) != sha(binData))
		}
	}

	// The SBOM has a component per binary with its sum, and its modules.
	f, err := os.Open(filepath.Join(out, base+".cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatal(err)
	}
	if bom.Metadata.Component.Version != "v1.2.3" {
		t.Errorf("SBOM is of %s, want v1.2.3", bom.Metadata.Component.Version)
	}
	byName := map[string]cdx.Component{}
	for _, c := range *bom.Components {
		byName[c.Name] = c
	}
	for _, name := range Files() {
		c, ok := byName[name]
		if !ok {
			t.Errorf("SBOM lacks %s", name)
			continue
		}
		if (*c.Hashes)[0].Value != sha(binData) || c.Type != cdx.ComponentTypeApplication {
			t.Errorf("SBOM component %s: %+v", name, c)
		}
	}

	// The images' layout names the manager's image as the chart does, for
	// the platform.
	layoutDir := t.TempDir()
	untar(t, filepath.Join(out, "fke_v1.2.3_images.tar"), layoutDir)
	loaded, err := image.Load(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	var imgNames []string
	for _, l := range loaded {
		imgNames = append(imgNames, l.Name)
		im, err := l.Index.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 || im.Manifests[0].Platform.Architecture != runtime.GOARCH {
			t.Errorf("%s: manifests %+v, want one for linux/%s", l.Name, im.Manifests, runtime.GOARCH)
		}
	}
	if !slices.Contains(imgNames, "fke/manager:v1.2.3") || len(imgNames) != len(Images("v1.2.3")) {
		t.Errorf("images %v, want fke/manager:v1.2.3 among %d", imgNames, len(Images("v1.2.3")))
	}

	ch, err := loader.LoadFile(filepath.Join(out, "fke-1.2.3.tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "1.2.3" || ch.Metadata.AppVersion != "v1.2.3" {
		t.Errorf("chart version %s, appVersion %s", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
}

func TestMakeRefusesBadInputAndWritesNothing(t *testing.T) {
	bin := tinyBinary(t)
	good := platformDir(t, bin)
	missing := platformDir(t, bin)
	if err := os.Remove(filepath.Join(missing, "kubelet")); err != nil {
		t.Fatal(err)
	}
	// A binary for the other architecture: the same ELF file with another machine.
	other := platformDir(t, bin)
	data, _ := os.ReadFile(bin)
	if runtime.GOARCH == "amd64" {
		data[18], data[19] = 183, 0 // EM_AARCH64
	} else {
		data[18], data[19] = 62, 0 // EM_X86_64
	}
	if err := os.WriteFile(filepath.Join(other, "kube-proxy"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	host := Platform{OS: "linux", Arch: runtime.GOARCH, Dir: good}
	for _, tc := range []struct {
		name string
		spec Spec
		want string
	}{
		{"no v", Spec{Version: "1.2.3", Platforms: []Platform{host}}, "leading v"},
		{"not semantic", Spec{Version: "v1.2", Platforms: []Platform{host}}, "semantic version"},
		{"no platform", Spec{Version: "v1.2.3"}, "no platform"},
		{"unknown platform", Spec{Version: "v1.2.3", Platforms: []Platform{{OS: "windows", Arch: "amd64", Dir: good}}}, "fke releases for linux/amd64 and linux/arm64"},
		{"platform twice", Spec{Version: "v1.2.3", Platforms: []Platform{host, host}}, "named twice"},
		{"missing binary", Spec{Version: "v1.2.3", Platforms: []Platform{{OS: "linux", Arch: runtime.GOARCH, Dir: missing}}}, "kubelet"},
		{"other architecture", Spec{Version: "v1.2.3", Platforms: []Platform{{OS: "linux", Arch: runtime.GOARCH, Dir: other}}}, "kube-proxy is built for"},
		{"no chart", Spec{Version: "v1.2.3", Platforms: []Platform{host}, Chart: t.TempDir()}, "no Chart.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Out = filepath.Join(t.TempDir(), "out")
			if tc.spec.Chart == "" {
				tc.spec.Chart = chartDir()
			}
			_, err := Make(context.Background(), tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if _, err := os.Stat(tc.spec.Out); !os.IsNotExist(err) {
				t.Errorf("the output directory was created: %v", err)
			}
		})
	}
	t.Run("output not empty", func(t *testing.T) {
		_, err := Make(context.Background(), Spec{Version: "v1.2.3", Out: nonEmpty, Platforms: []Platform{host}, Chart: chartDir()})
		if err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("error %v, want one saying the directory is not empty", err)
		}
		if entries, _ := os.ReadDir(nonEmpty); len(entries) != 1 {
			t.Errorf("the output directory holds %d entries, want its one file", len(entries))
		}
	})
}

func TestParsePlatform(t *testing.T) {
	p, err := ParsePlatform("linux/arm64=out/arm")
	if err != nil || p != (Platform{OS: "linux", Arch: "arm64", Dir: "out/arm"}) {
		t.Fatalf("got %+v, %v", p, err)
	}
	for _, bad := range []string{"linux/arm64", "linux=dir", "linux/arm64="} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

type entry struct {
	mode int64
	data []byte
	dir  bool
}

func readTarGz(t *testing.T, p string) map[string]entry {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	return readTar(t, zr)
}

// readTar reads every entry of the tar r (a directory's data is empty).
func readTar(t *testing.T, r io.Reader) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = entry{mode: h.Mode, data: data, dir: h.Typeflag == tar.TypeDir}
	}
}

// untar extracts the plain tar at p into dir (the test's own archive).
func untar(t *testing.T, p, dir string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, e := range readTar(t, f) {
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if e.dir {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, e.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
