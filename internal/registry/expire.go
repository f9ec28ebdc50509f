package registry

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// ExpireCached is a pull-through cache's expiry (distribution's proxy.ttl):
// it deletes the tags, manifests and blob links of every repository whose
// link was written before olderThan, that is, fetched from the remote
// longer ago than the TTL. A later pull fetches them again; the data of
// blobs no longer linked anywhere is reclaimed by garbage collection. It
// reports how many entries it deleted.
func (r *Registry) ExpireCached(ctx context.Context, olderThan time.Time) (int, error) {
	type entry struct {
		repo, ref string
		layer     bool
	}
	var expired []entry
	// Collected first, deleted after: a walk must not see its own deletes.
	err := r.d.Walk(ctx, layout.RepositoriesDir, func(fi driver.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if fi.IsDir {
			if strings.HasSuffix(fi.Path, "/_uploads") || strings.HasSuffix(fi.Path, "/_referrers") {
				return driver.ErrSkipDir
			}
			return nil
		}
		if !strings.HasSuffix(fi.Path, "/link") || !fi.ModTime.Before(olderThan) {
			return nil
		}
		rel := strings.TrimPrefix(fi.Path, layout.RepositoriesDir+"/")
		switch {
		case strings.Contains(rel, "/_manifests/tags/") && strings.HasSuffix(rel, "/current/link"):
			repo, rest, _ := strings.Cut(rel, "/_manifests/tags/")
			expired = append(expired, entry{repo: repo, ref: strings.TrimSuffix(rest, "/current/link")})
		case strings.Contains(rel, "/_manifests/revisions/"):
			repo, rest, _ := strings.Cut(rel, "/_manifests/revisions/")
			if d, ok := linkDigest(rest); ok {
				expired = append(expired, entry{repo: repo, ref: d.String()})
			}
		case strings.Contains(rel, "/_layers/"):
			repo, rest, _ := strings.Cut(rel, "/_layers/")
			if d, ok := linkDigest(rest); ok {
				expired = append(expired, entry{repo: repo, ref: d.String(), layer: true})
			}
		}
		return nil
	})
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	n := 0
	errs := []error{err}
	for _, e := range expired {
		var derr error
		if e.layer {
			d := digest.Digest(e.ref)
			derr = r.d.Delete(ctx, layout.LayerLinkDir(e.repo, d))
			if dc := r.opts.Descriptors; dc != nil {
				dc.Forget(ctx, e.repo, d)
			}
		} else {
			derr = r.deleteManifest(ctx, e.repo, e.ref)
		}
		switch {
		case derr == nil:
			n++
		case !errors.Is(derr, driver.ErrNotFound) && !errors.Is(derr, ErrManifestUnknown) && !errors.Is(derr, ErrNameUnknown):
			errs = append(errs, derr)
		}
	}
	return n, errors.Join(errs...)
}

// linkDigest reads "<alg>/<hex>/link" as a digest.
func linkDigest(rest string) (digest.Digest, bool) {
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[2] != "link" {
		return "", false
	}
	d := digest.NewDigestFromEncoded(digest.Algorithm(parts[0]), parts[1])
	return d, d.Validate() == nil
}
