package registry

import (
	"context"
	"errors"
	"path"
	"slices"
	"strings"

	"github.com/cairn-registry/cairn/internal/layout"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Referrers returns descriptors of the manifests in repo whose subject is
// subject, filtered to artifactType when it is not "". A subject nothing
// refers to (or that does not exist) has no referrers, not an error.
func (r *Registry) Referrers(ctx context.Context, repo string, subject digest.Digest, artifactType string) ([]ocispec.Descriptor, error) {
	algDirs, err := r.d.List(ctx, layout.ReferrersDir(repo, subject))
	if errors.Is(err, driver.ErrNotFound) {
		return []ocispec.Descriptor{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []ocispec.Descriptor{}
	for _, algDir := range algDirs {
		entries, err := r.d.List(ctx, algDir)
		if err != nil {
			if errors.Is(err, driver.ErrNotFound) {
				continue
			}
			return nil, err
		}
		for _, e := range entries {
			d, err := digest.Parse(path.Base(algDir) + ":" + path.Base(e))
			if err != nil {
				continue // a stray entry is not a referrer
			}
			desc, ok, err := r.referrerDescriptor(ctx, repo, d)
			if err != nil {
				return nil, err
			}
			if !ok || (artifactType != "" && desc.ArtifactType != artifactType) {
				continue
			}
			out = append(out, desc)
		}
	}
	slices.SortFunc(out, func(a, b ocispec.Descriptor) int { return strings.Compare(string(a.Digest), string(b.Digest)) })
	return out, nil
}

// referrerDescriptor describes manifest d of repo for the referrers list; ok
// is false when d is no longer a revision of repo (deleted since).
func (r *Registry) referrerDescriptor(ctx context.Context, repo string, d digest.Digest) (ocispec.Descriptor, bool, error) {
	ok, err := r.exists(ctx, layout.RevisionLink(repo, d))
	if err != nil || !ok {
		return ocispec.Descriptor{}, false, err
	}
	content, err := r.d.GetContent(ctx, layout.BlobData(d))
	if errors.Is(err, driver.ErrNotFound) {
		return ocispec.Descriptor{}, false, nil
	}
	if err != nil {
		return ocispec.Descriptor{}, false, err
	}
	m, err := r.opts.Parser.Parse(d, content)
	if err != nil {
		return ocispec.Descriptor{}, false, nil
	}
	return m.Descriptor(), true, nil
}
