package registry

import (
	"context"
	"errors"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// LinkTime is a tag or manifest revision of a repository and when its
// link was last written (pushed, fetched, or touched).
type LinkTime struct {
	Tag     string        // "" for a revision
	Digest  digest.Digest // the revision's digest; "" for a tag
	Written time.Time
}

// ManifestLinks lists repo's tags and revisions with their write times, in
// one walk of its manifests directory.
func (r *Registry) ManifestLinks(ctx context.Context, repo string) (tags, revisions []LinkTime, err error) {
	err = r.d.Walk(ctx, layout.ManifestsDir(repo), func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		e := layout.ParseRepoPath(fi.Path)
		switch e.Kind {
		case layout.EntryTagCurrent:
			tags = append(tags, LinkTime{Tag: e.Tag, Written: fi.ModTime})
		case layout.EntryRevisionLink:
			d := digest.NewDigestFromEncoded(digest.Algorithm(e.Alg), e.Hex)
			if d.Validate() == nil {
				revisions = append(revisions, LinkTime{Digest: d, Written: fi.ModTime})
			}
		}
		return nil
	})
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	return tags, revisions, err
}

// TagDigest reads which manifest tag names in repo.
func (r *Registry) TagDigest(ctx context.Context, repo, tag string) (digest.Digest, error) {
	d, err := r.readLink(ctx, layout.TagCurrentLink(repo, tag))
	if errors.Is(err, driver.ErrNotFound) {
		return "", r.unknownManifest(ctx, repo, tag)
	}
	return d, err
}

// Touch rewrites the link of ref (a tag, or a revision's digest) in repo
// while it still holds d: its write time becomes now (a pull-through cache
// marks what clients still pull). A link that is gone, or names another
// manifest now (moved by another writer, itself fresh), is left alone.
func (r *Registry) Touch(ctx context.Context, repo, ref string, d digest.Digest) error {
	p := layout.TagCurrentLink(repo, ref)
	if ref == d.String() {
		p = layout.RevisionLink(repo, d)
	}
	cur, err := r.readLink(ctx, p)
	if errors.Is(err, driver.ErrNotFound) || err == nil && cur != d {
		return nil
	}
	if err != nil {
		return err
	}
	return r.writeLink(ctx, p, d)
}

// Reach adds manifest d of repo, and what it names as an index (over and
// over), to keep: what a tag keeps alive for retention and expiry. A
// manifest that is gone, or an index entry that is no manifest, ends its
// branch.
func (r *Registry) Reach(ctx context.Context, repo string, d digest.Digest, keep map[digest.Digest]bool) error {
	if keep[d] {
		return nil
	}
	keep[d] = true
	m, err := r.GetManifest(ctx, repo, d.String())
	if errors.Is(err, ErrManifestUnknown) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, child := range m.Manifests {
		if err := r.Reach(ctx, repo, child.Digest, keep); err != nil {
			return err
		}
	}
	return nil
}
