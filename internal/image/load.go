package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// Loaded is one image (or multi-platform index) read from a file.
type Loaded struct {
	// Name is "<repository>:<tag>" as it will be named in fke's registry,
	// without any registry host ("docker.io/library/nginx:1.27" becomes
	// "library/nginx:1.27"). Empty when the file names none.
	Name  string
	Image v1.Image
	Index v1.ImageIndex
}

// AnnotationRefName is the OCI layout annotation naming an image.
const AnnotationRefName = "org.opencontainers.image.ref.name"

// Load reads the images of path: a directory in OCI image layout, a
// docker-archive tar (`docker save`), or a tar of an OCI image layout.
func Load(path string) ([]Loaded, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading images: %w", err)
	}
	if st.IsDir() {
		return loadLayout(path)
	}
	has, err := tarHas(path, "manifest.json", "index.json")
	if err != nil {
		return nil, err
	}
	switch {
	case has["manifest.json"]:
		return loadDockerArchive(path)
	case has["index.json"]:
		return nil, fmt.Errorf("%s is a tar of an OCI image layout: unpack it (mkdir dir && tar -xf %s -C dir) and push the directory", path, path)
	default:
		return nil, fmt.Errorf("%s is neither an OCI image layout directory nor a docker-archive tar (no manifest.json)", path)
	}
}

// tarHas reports which of names are entries of the tar at path.
func tarHas(path string, names ...string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading images: %w", err)
	}
	defer f.Close()
	found := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return found, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s is not a tar archive: %w", path, err)
		}
		for _, n := range names {
			if strings.TrimPrefix(h.Name, "./") == n {
				found[n] = true
			}
		}
	}
}

func loadDockerArchive(path string) ([]Loaded, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(path) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var out []Loaded
	for i, d := range m {
		if len(d.RepoTags) == 0 {
			if len(m) > 1 {
				return nil, fmt.Errorf("%s: image %d has no tag; save images with names or push one at a time with --name", path, i)
			}
			img, err := tarball.Image(opener, nil)
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", path, err)
			}
			out = append(out, Loaded{Image: img})
			continue
		}
		for _, rt := range d.RepoTags {
			tag, err := name.NewTag(rt, name.WeakValidation)
			if err != nil {
				return nil, fmt.Errorf("%s: tag %q: %w", path, rt, err)
			}
			img, err := tarball.Image(opener, &tag)
			if err != nil {
				return nil, fmt.Errorf("reading %s from %s: %w", rt, path, err)
			}
			out = append(out, Loaded{Name: tag.RepositoryStr() + ":" + tag.TagStr(), Image: img})
		}
	}
	return out, nil
}

func loadLayout(dir string) ([]Loaded, error) {
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout (no index.json)", dir)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading OCI layout %s: %w", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading OCI layout %s: %w", dir, err)
	}
	var out []Loaded
	for _, d := range im.Manifests {
		l := Loaded{}
		if ref := d.Annotations[AnnotationRefName]; ref != "" {
			l.Name, err = normalize(ref)
			if err != nil {
				return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
			}
		}
		switch {
		case d.MediaType.IsImage():
			l.Image, err = idx.Image(d.Digest)
		case d.MediaType.IsIndex():
			l.Index, err = idx.ImageIndex(d.Digest)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("OCI layout %s holds no image", dir)
	}
	return out, nil
}

// normalize turns an image reference, or a bare tag as some tools write in
// OCI layouts, into "<repository>:<tag>" without a registry host. A bare
// tag ("v1") yields ":v1", to be completed by the caller's name.
func normalize(ref string) (string, error) {
	if !strings.ContainsAny(ref, "/:@") {
		return ":" + ref, nil
	}
	tag, err := name.NewTag(ref, name.WeakValidation)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", ref, err)
	}
	return tag.RepositoryStr() + ":" + tag.TagStr(), nil
}

// Named returns the name l is pushed under: override when set (a
// "<repository>:<tag>", or a repository to which l's tag is added), else
// l's own name. It fails when neither gives a repository and a tag.
func (l Loaded) Named(override string) (string, error) {
	own := l.Name
	switch {
	case override == "" && own == "":
		return "", errors.New("the image has no name: give one with --name REPOSITORY:TAG")
	case override == "" && strings.HasPrefix(own, ":"):
		return "", fmt.Errorf("the image is tagged %s but has no repository: give one with --name REPOSITORY", own[1:])
	case override == "":
		return own, nil
	}
	if strings.Contains(override, ":") {
		return override, nil
	}
	tag := "latest"
	if i := strings.LastIndex(own, ":"); i >= 0 {
		tag = own[i+1:]
	}
	return override + ":" + tag, nil
}
