package registry

import (
	"context"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/fence"
)

// manifestRecord describes a manifest push for the GC journal; ok is false
// when content does not parse (validation then refuses it before anything
// is read or stored).
func manifestRecord(repo string, d digest.Digest, content []byte, tags []string) (*fence.Record, bool) {
	refs, _, err := ParseManifestRefs(content)
	if err != nil {
		return nil, false
	}
	return &fence.Record{Repo: repo, Manifest: true, Digest: d, Tags: tags, Blobs: refs.Blobs, Children: refs.Manifests}, true
}

// protectForGC journals rec before the caller relies on stored content a GC
// may be deleting (see package fence).
func (r *Registry) protectForGC(ctx context.Context, rec *fence.Record) (done func(), err error) {
	return fence.Protect(ctx, r.d, rec)
}
