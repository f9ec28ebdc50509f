package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/fence"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// RelinkManifest makes the stored manifest d a revision of repo again, with
// its referrers-index link when it has a subject: the links a manifest PUT
// writes besides tags, for repairing links storage lost (cairn scrub
// --repair). It writes nothing and reports false when d's data is not
// stored. The data must hash to d: a corrupt manifest is not made visible.
// Like a PUT it journals what it relies on before checking that it exists
// (see package fence), so a GC running meanwhile cannot delete the manifest
// from under the new link.
func (r *Registry) RelinkManifest(ctx context.Context, repo string, d digest.Digest) (bool, error) {
	if err := d.Validate(); err != nil {
		return false, fmt.Errorf("%w: %v", ErrDigestInvalid, err)
	}
	content, err := r.d.GetContent(ctx, layout.BlobData(d))
	if errors.Is(err, driver.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if got := d.Algorithm().FromBytes(content); got != d {
		return false, fmt.Errorf("%w: stored manifest %s has digest %s", ErrDigestInvalid, d, got)
	}
	m, err := r.opts.Parser.Parse(d, content)
	if err != nil {
		return false, fmt.Errorf("%w: stored manifest %s is not JSON", ErrManifestInvalid, d)
	}
	if m.Subject != nil && m.Subject.Digest.Validate() != nil {
		m.Subject = nil // a subject no push would have accepted links nothing
	}
	refs, _ := m.Refs()
	done, err := r.protectForGC(ctx, &fence.Record{Repo: repo, Manifest: true, Digest: d, Blobs: refs.Blobs, Children: refs.Manifests})
	if err != nil {
		return false, err
	}
	defer done()
	// The data may have gone while the record was written.
	if ok, err := r.exists(ctx, layout.BlobData(d)); err != nil || !ok {
		return false, err
	}
	if err := r.storeLinks(ctx, repo, d, m, nil); err != nil {
		return false, err
	}
	return true, nil
}
