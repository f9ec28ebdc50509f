package replicate

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/registry"
)

// push sends the repository's selected tags, and their referrers, to the
// peer. One image's failure does not stop the others; an unreachable peer
// does.
func (s *repoSync) push(ctx context.Context) error {
	src := s.r.local
	tags, err := src.Tags(ctx, s.repo)
	if errors.Is(err, registry.ErrNameUnknown) {
		return nil // gone since it was listed
	}
	if err != nil {
		return fmt.Errorf("listing tags: %w", err)
	}
	return s.syncTags(ctx, tags, direction{tree: s.pushTree,
		referrers: func(ctx context.Context, subject digest.Digest) ([]ocispec.Descriptor, error) {
			return src.Referrers(ctx, s.repo, subject, "")
		},
		gone: func(err error) bool { return errors.Is(err, registry.ErrManifestUnknown) },
		resolve: func(ctx context.Context, tag string) (digest.Digest, bool, error) {
			d, err := src.TagDigest(ctx, s.repo, tag)
			if errors.Is(err, registry.ErrManifestUnknown) || errors.Is(err, registry.ErrNameUnknown) {
				return "", false, nil // deleted since listed
			}
			return d, err == nil, err
		}})
}

// pushTree sends manifest d, as tag when not "", else by digest: its child
// manifests and blobs first, unless the record or a HEAD finds d there.
func (s *repoSync) pushTree(ctx context.Context, d digest.Digest, tag string) error {
	s.seen[d] = true
	m, err := s.r.local.StatManifest(ctx, s.repo, d.String())
	if err != nil {
		return err
	}
	there := s.rec.done[d]
	if !there {
		if there, err = s.t.peer.hasManifest(ctx, s.repo, d); err != nil {
			return err
		}
	}
	if there {
		if tag == "" {
			return nil
		}
		_, err := s.t.peer.putManifest(ctx, s.repo, tag, m.MediaType, m.Content)
		return err
	}
	refs, _ := m.Refs()
	for _, child := range refs.Manifests {
		if err := s.pushTree(ctx, child, ""); err != nil {
			if errors.Is(err, registry.ErrManifestUnknown) {
				// Not stored here (a sparse index): the peer decides
				// whether it takes the index without it.
				continue
			}
			return fmt.Errorf("child %s: %w", child, err)
		}
		s.rec.done[child] = true
	}
	for _, b := range refs.Blobs {
		if err := s.pushBlob(ctx, b); err != nil {
			return fmt.Errorf("blob %s: %w", b, err)
		}
	}
	ref := tag
	if ref == "" {
		ref = d.String()
	}
	indexed, err := s.t.peer.putManifest(ctx, s.repo, ref, m.MediaType, m.Content)
	if err != nil {
		return err
	}
	s.sum.Manifests++
	if m.Subject != nil && !indexed {
		// A peer without the referrers API: keep its tag-schema index.
		if err := s.t.peer.addFallbackReferrer(ctx, s.repo, m.Subject.Digest, m.Descriptor(), s.r.local.MaxManifestSize()); err != nil {
			return fmt.Errorf("referrers tag of %s: %w", m.Subject.Digest, err)
		}
	}
	return nil
}

// pushBlob sends blob d unless the peer's repository has it: mounted from
// another of its repositories that has it, else uploaded.
func (s *repoSync) pushBlob(ctx context.Context, d digest.Digest) error {
	has, err := s.t.peer.hasBlob(ctx, s.repo, d)
	if err != nil {
		return err
	}
	if has {
		s.mounts[d] = s.repo
		return nil
	}
	info, err := s.r.local.StatBlob(ctx, s.repo, d)
	if errors.Is(err, registry.ErrBlobUnknown) {
		// Never pushed here (a foreign layer, a sparse manifest): the
		// peer decides whether the manifest goes without it.
		return nil
	}
	if err != nil {
		return err
	}
	from := s.mounts[d]
	mounted, loc, err := s.t.peer.startUpload(ctx, s.repo, d, from)
	if err != nil {
		return err
	}
	if mounted {
		s.sum.Mounted++
		s.mounts[d] = s.repo
		return nil
	}
	open := func() (io.ReadCloser, error) { return s.r.local.OpenBlob(ctx, d, info, 0) }
	if err := s.t.peer.finishUpload(ctx, s.repo, loc, d, info.Size, open); err != nil {
		return err
	}
	s.sum.Blobs++
	s.sum.Bytes += info.Size
	s.mounts[d] = s.repo
	return nil
}
