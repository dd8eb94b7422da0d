package release

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/uuid"

	"fke.dev/fke/internal/binaries"
)

// goPURL is the package URL of a Go module.
func goPURL(m *debug.Module) string {
	if m.Replace != nil {
		m = m.Replace
	}
	return "pkg:golang/" + m.Path + "@" + m.Version
}

// SBOM describes the binaries of p's tarball: one application component
// per binary (its main module's version, its SHA-256, the Go toolchain
// that built it) and one library component per Go module any of them
// links, with each binary's modules as its dependencies. Everything comes
// from the binaries' own build information; sums are their SHA-256 by
// path.
func SBOM(version string, p Platform, files []string, sums map[string]string) (*cdx.BOM, error) {
	bom := cdx.NewBOM()
	top := "fke@" + version
	bom.Metadata = &cdx.Metadata{
		Component: &cdx.Component{BOMRef: top, Type: cdx.ComponentTypeApplication, Name: "fke", Version: version,
			Description: "fke " + version + " for " + p.String()},
		Properties: &[]cdx.Property{{Name: "fke:platform", Value: p.String()}},
	}
	var apps []cdx.Component
	libs := map[string]cdx.Component{}
	deps := []cdx.Dependency{}
	var refs []string
	for _, f := range files {
		path := p.Dir + "/" + f
		bi, err := buildinfo.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("SBOM of %s: reading the build information of %s: %w", p, path, err)
		}
		st := binaries.StampOf(bi)
		ref := "file:" + f
		refs = append(refs, ref)
		c := cdx.Component{BOMRef: ref, Type: cdx.ComponentTypeApplication, Name: f, Version: st.Version,
			Hashes: &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sums[f]}},
			Properties: &[]cdx.Property{
				{Name: "fke:go-package", Value: st.Package}, {Name: "fke:go-module", Value: st.Module}, {Name: "fke:go-toolchain", Value: st.Go},
			}}
		if st.Module != "" && st.Version != "" {
			c.PackageURL = "pkg:golang/" + st.Module + "@" + st.Version
		}
		apps = append(apps, c)
		var linked []string
		for _, m := range bi.Deps {
			purl := goPURL(m)
			mod := m
			if m.Replace != nil {
				mod = m.Replace
			}
			if _, ok := libs[purl]; !ok {
				libs[purl] = cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: mod.Path, Version: mod.Version, PackageURL: purl}
			}
			if !slices.Contains(linked, purl) {
				linked = append(linked, purl)
			}
		}
		slices.Sort(linked)
		deps = append(deps, cdx.Dependency{Ref: ref, Dependencies: &linked})
	}
	deps = append([]cdx.Dependency{{Ref: top, Dependencies: &refs}}, deps...)
	for _, k := range slices.Sorted(maps.Keys(libs)) {
		apps = append(apps, libs[k])
	}
	bom.Components = &apps
	bom.Dependencies = &deps
	// The same binaries give the same SBOM: its serial number is derived
	// from their sums.
	var seed bytes.Buffer
	for _, f := range files {
		seed.WriteString(f + "=" + sums[f] + "\n")
	}
	bom.SerialNumber = "urn:uuid:" + uuid.NewSHA1(uuid.NameSpaceURL, seed.Bytes()).String()
	return bom, nil
}

// writeSBOM writes p's SBOM as CycloneDX JSON at dst.
func writeSBOM(dst, version string, p Platform, files []string, sums map[string]string) error {
	bom, err := SBOM(version, p, files, sums)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.Encode(bom); err != nil {
		return fmt.Errorf("encoding the SBOM of %s: %w", p, err)
	}
	return writeFile(dst, buf.Bytes())
}
