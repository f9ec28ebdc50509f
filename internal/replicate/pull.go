package replicate

import (
	"context"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/proxy"
	"github.com/cairn-registry/cairn/internal/registry"
)

// pull brings the peer's selected tags of the repository, and their
// referrers, into this registry, as a client's push would: blobs are
// checked against their digests as they are stored, manifests against
// theirs, and a manifest is stored only once everything it names is.
func (s *repoSync) pull(ctx context.Context) error {
	tags, err := s.t.peer.tags(ctx, s.repo)
	if err != nil {
		return fmt.Errorf("listing tags: %w", err)
	}
	return s.syncTags(ctx, tags, direction{tree: s.pullTree, gone: proxy.IsNotFound,
		referrers: func(ctx context.Context, subject digest.Digest) ([]ocispec.Descriptor, error) {
			return s.t.peer.referrers(ctx, s.repo, subject)
		},
		resolve: func(ctx context.Context, tag string) (digest.Digest, bool, error) {
			if !registry.ValidTag(tag) {
				return "", false, nil
			}
			d, err := s.t.peer.c.ManifestDigest(ctx, s.repo, tag)
			if proxy.IsNotFound(err) {
				return "", false, nil // deleted since listed
			}
			if err != nil {
				// Some registries answer a HEAD without the digest: fetch
				// by tag and hash (a dead peer fails this too).
				_, _, d, err = s.t.peer.c.Manifest(ctx, s.repo, tag, s.r.local.MaxManifestSize())
				if proxy.IsNotFound(err) {
					return "", false, nil
				}
			}
			return d, err == nil, err
		}})
}

// pullTree stores manifest d as tag when not "", else by digest: its
// child manifests and blobs first, unless the record or this registry
// has d already.
func (s *repoSync) pullTree(ctx context.Context, d digest.Digest, tag string) error {
	s.seen[d] = true
	local := s.r.local
	if m, err := local.StatManifest(ctx, s.repo, d.String()); err == nil {
		if tag != "" {
			_, err = local.PutManifest(ctx, s.repo, tag, m.MediaType, m.Content, nil)
		}
		return err
	} else if !errors.Is(err, registry.ErrManifestUnknown) && !errors.Is(err, registry.ErrNameUnknown) {
		return err
	}
	content, mediaType, _, err := s.t.peer.c.Manifest(ctx, s.repo, d.String(), local.MaxManifestSize())
	if err != nil {
		return err
	}
	m, err := manifest.Parse(d, content)
	if err != nil {
		return fmt.Errorf("%w: manifest %s: %w", errRefused, d, err)
	}
	if !manifest.IsMediaType(mediaType) {
		mediaType = "" // let the registry tell it from the content
	}
	refs, _ := m.Refs()
	for _, child := range refs.Manifests {
		if err := s.pullTree(ctx, child, ""); err != nil {
			return fmt.Errorf("child %s: %w", child, err)
		}
		s.rec.done[child] = true
	}
	for _, b := range refs.Blobs {
		if err := s.pullBlob(ctx, b); err != nil {
			return fmt.Errorf("blob %s: %w", b, err)
		}
	}
	ref := tag
	if ref == "" {
		ref = d.String()
	}
	if _, err := local.PutManifest(ctx, s.repo, ref, mediaType, content, nil); err != nil {
		return fmt.Errorf("storing manifest %s: %w", d, err)
	}
	s.sum.Manifests++
	return nil
}

// pullBlob stores blob d in the repository unless it is linked there:
// linked from another repository of this registry that holds it, else
// fetched from the peer and checked against d as it is stored.
func (s *repoSync) pullBlob(ctx context.Context, d digest.Digest) error {
	local := s.r.local
	if _, err := local.StatBlob(ctx, s.repo, d); err == nil {
		return nil
	} else if !errors.Is(err, registry.ErrBlobUnknown) && !errors.Is(err, registry.ErrNameUnknown) {
		return err
	}
	if ok, err := local.MountBlob(ctx, s.repo, d, ""); err != nil {
		return err
	} else if ok {
		s.sum.Mounted++
		return nil
	}
	body, _, err := s.t.peer.c.Blob(ctx, s.repo, d)
	if proxy.IsNotFound(err) {
		// Not on the peer (a foreign layer, a sparse manifest): storing
		// the manifest tells whether it may go without.
		return nil
	}
	if err != nil {
		return err
	}
	defer body.Close()
	id, err := local.StartUpload(ctx, s.repo)
	if err != nil {
		return err
	}
	n, err := local.FinishUpload(ctx, s.repo, id, d, body, 0)
	if err != nil {
		local.CancelUpload(context.WithoutCancel(ctx), s.repo, id)
		if errors.Is(err, registry.ErrDigestInvalid) {
			return fmt.Errorf("%w: blob %s from the peer does not match its digest", proxy.ErrUpstream, d)
		}
		return err
	}
	s.sum.Blobs++
	s.sum.Bytes += n
	return nil
}
