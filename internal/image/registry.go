package image

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Registry is fke's OCI registry, reached over plain HTTP on loopback.
type Registry struct {
	// Host is host:port, e.g. 127.0.0.1:5000.
	Host string
}

// Ref parses "<repository>:<tag>" or "<repository>@<digest>" as a
// reference into r.
func (r Registry) Ref(repoAndTag string) (name.Reference, error) {
	if r.Host == "" {
		return nil, errors.New("no registry address: is `fke up` running with its registry?")
	}
	ref, err := name.ParseReference(r.Host+"/"+repoAndTag, name.Insecure, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("image name %q: %w (want a repository such as team/app and a tag: team/app:v1)", repoAndTag, err)
	}
	return ref, nil
}

func (r Registry) options(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithTransport(http.DefaultTransport)}
}

// Push writes img to r as repoAndTag ("<repository>:<tag>") and returns its
// digest. Blobs the registry already has are not sent again, so pushing an
// unchanged image is cheap.
func (r Registry) Push(ctx context.Context, repoAndTag string, img v1.Image) (v1.Hash, error) {
	ref, err := r.Ref(repoAndTag)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.Write(ref, img, r.options(ctx)...); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("digest of %s: %w", ref, err)
	}
	return d, nil
}

// PushIndex is Push for a multi-platform image index.
func (r Registry) PushIndex(ctx context.Context, repoAndTag string, idx v1.ImageIndex) (v1.Hash, error) {
	ref, err := r.Ref(repoAndTag)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.WriteIndex(ref, idx, r.options(ctx)...); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	return idx.Digest()
}

// Head returns the descriptor of repoAndTag, or ok=false when the registry
// does not have it.
func (r Registry) Head(ctx context.Context, repoAndTag string) (desc *v1.Descriptor, ok bool, err error) {
	ref, err := r.Ref(repoAndTag)
	if err != nil {
		return nil, false, err
	}
	desc, err = remote.Head(ref, r.options(ctx)...)
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("looking up %s: %w", ref, err)
	}
	return desc, true, nil
}

// Manifest returns the raw manifest of repoAndTag and its descriptor.
func (r Registry) Manifest(ctx context.Context, repoAndTag string) ([]byte, *remote.Descriptor, error) {
	ref, err := r.Ref(repoAndTag)
	if err != nil {
		return nil, nil, err
	}
	d, err := remote.Get(ref, r.options(ctx)...)
	if err != nil {
		return nil, nil, fmt.Errorf("getting %s: %w", ref, err)
	}
	return d.Manifest, d, nil
}

// Entry is one tagged image in the registry.
type Entry struct {
	Repository string
	Tag        string
	Digest     v1.Hash
	// Size is the sum of the manifest's config and layer sizes (bytes);
	// 0 for an index.
	Size int64
}

// List returns every tagged image in r, sorted by repository and tag.
func (r Registry) List(ctx context.Context) ([]Entry, error) {
	if r.Host == "" {
		return nil, errors.New("no registry address: is `fke up` running with its registry?")
	}
	reg, err := name.NewRegistry(r.Host, name.Insecure)
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", r.Host, err)
	}
	repos, err := remote.Catalog(ctx, reg, r.options(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("listing repositories of %s: %w", r.Host, err)
	}
	slices.Sort(repos)
	var out []Entry
	for _, repo := range repos {
		rp, err := name.NewRepository(r.Host+"/"+repo, name.Insecure)
		if err != nil {
			return nil, fmt.Errorf("repository %s: %w", repo, err)
		}
		tags, err := remote.List(rp, r.options(ctx)...)
		if err != nil {
			return nil, fmt.Errorf("listing tags of %s: %w", repo, err)
		}
		slices.Sort(tags)
		for _, tag := range tags {
			e := Entry{Repository: repo, Tag: tag}
			d, err := remote.Get(rp.Tag(tag), r.options(ctx)...)
			if err != nil {
				return nil, fmt.Errorf("getting %s:%s: %w", repo, tag, err)
			}
			e.Digest = d.Digest
			if m, err := v1.ParseManifest(bytesReader(d.Manifest)); err == nil && d.MediaType.IsImage() {
				e.Size = m.Config.Size
				for _, l := range m.Layers {
					e.Size += l.Size
				}
			}
			out = append(out, e)
		}
	}
	return out, nil
}
