package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/registry"
)

// Expiry (an upstream's TTL): a cached tag is fresh while its link was
// written within the TTL; fetching it, and a pull that revalidates it
// (at most once per revalidation interval), rewrite it. A stale tag is
// untagged. Then each revision of the repository no fresh tag reaches
// (through indexes) and not itself written within the TTL is deleted, as
// an API DELETE would. Blobs are left to the garbage collector, which
// frees only those no manifest anywhere (cached or pushed) names.

// expiryStore is what expiry needs of the registry beyond Store.
type expiryStore interface {
	Repositories(ctx context.Context, n int, last string) ([]string, bool, error)
	ManifestLinks(ctx context.Context, repo string) (tags, revisions []registry.LinkTime, err error)
	TagDigest(ctx context.Context, repo, tag string) (digest.Digest, error)
	Evict(ctx context.Context, repo, ref string) error
	Touch(ctx context.Context, repo, ref string, d digest.Digest) error
	Reach(ctx context.Context, repo string, d digest.Digest, keep map[digest.Digest]bool) error
}

// ExpireReport counts what an expiry removed.
type ExpireReport struct {
	Repositories int // mirrored repositories looked at
	Tags         int // tags untagged
	Manifests    int // revisions deleted
}

// Expire removes the cached content of every upstream with a TTL that
// nobody refreshed within it, as of now.
func (c *Cache) Expire(ctx context.Context, now time.Time) (ExpireReport, error) {
	var rep ExpireReport
	es := c.expiry
	if es == nil {
		return rep, errors.New("proxy: the store cannot expire content")
	}
	last := ""
	for {
		repos, more, err := es.Repositories(ctx, 1000, last)
		if err != nil {
			return rep, err
		}
		for _, repo := range repos {
			m, _, ok := c.route(repo)
			if !ok || m.TTL <= 0 {
				continue
			}
			rep.Repositories++
			if err := c.expireRepo(ctx, es, repo, now.Add(-m.TTL), &rep); err != nil {
				return rep, fmt.Errorf("proxy: expiring %s: %w", repo, err)
			}
		}
		if !more || len(repos) == 0 {
			return rep, nil
		}
		last = repos[len(repos)-1]
	}
}

func (c *Cache) expireRepo(ctx context.Context, es expiryStore, repo string, before time.Time, rep *ExpireReport) error {
	tags, revisions, err := es.ManifestLinks(ctx, repo)
	if err != nil {
		return err
	}
	keep := make(map[digest.Digest]bool)
	for _, t := range tags {
		if t.Written.Before(before) {
			if err := es.Evict(ctx, repo, t.Tag); err != nil && !errors.Is(err, registry.ErrManifestUnknown) {
				return err
			}
			c.forget(repo, t.Tag)
			rep.Tags++
			continue
		}
		d, err := es.TagDigest(ctx, repo, t.Tag)
		if errors.Is(err, registry.ErrManifestUnknown) {
			continue // untagged meanwhile
		}
		if err != nil {
			return err
		}
		if err := es.Reach(ctx, repo, d, keep); err != nil {
			return err
		}
	}
	for _, r := range revisions {
		if keep[r.Digest] || !r.Written.Before(before) {
			continue
		}
		if err := es.Evict(ctx, repo, r.Digest.String()); err != nil && !errors.Is(err, registry.ErrManifestUnknown) {
			return err
		}
		rep.Manifests++
	}
	return nil
}

// forget drops tag's revalidation record, so that its next pull asks the
// upstream.
func (c *Cache) forget(repo, tag string) {
	c.mu.Lock()
	delete(c.checked, repo+":"+tag)
	c.mu.Unlock()
}
