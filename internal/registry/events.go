package registry

import (
	"context"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/manifest"
)

// Observer learns what clients push and pull (dedup's worker and
// predictor implement it). The registry calls it after a manifest PUT
// stored everything, after a manifest GET (not HEAD) found its manifest,
// and before a blob GET from its first byte opens the blob. Calls must
// return quickly: they run on the request path.
type Observer interface {
	ManifestPushed(ctx context.Context, repo string, m *manifest.Manifest)
	ManifestPulled(ctx context.Context, client string, m *manifest.Manifest)
	BlobPulled(ctx context.Context, client string, d digest.Digest)
}

type clientKey struct{}

// WithClient returns ctx naming the client a request comes from (a user,
// else an address), for the Observer's pull records.
func WithClient(ctx context.Context, client string) context.Context {
	return context.WithValue(ctx, clientKey{}, client)
}

// ClientFrom returns the client WithClient stored in ctx, or "".
func ClientFrom(ctx context.Context) string {
	c, _ := ctx.Value(clientKey{}).(string)
	return c
}
