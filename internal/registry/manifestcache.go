package registry

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/arc"
	"github.com/cairn-registry/cairn/internal/manifest"
)

// manifestCache keeps what a manifest GET or HEAD reads from storage, so
// that a popular manifest is served from memory:
//
//   - manifests by digest, parsed (bytes, media type, descriptors). A
//     digest names its bytes forever, so an entry never goes stale; whether
//     a repository still has it is the revision link's business.
//   - links: a tag's current digest, and that a repository has a revision.
//     They change, so an entry is trusted for ttl after it was read from
//     storage. Writes through this Registry (manifest PUT and DELETE) bump
//     the repository's generation, which voids its entries at once; writes
//     through another node sharing the storage are seen at once when the
//     nodes share LinkVersions (an entry keeps the version read before
//     it), else within ttl.
//
// Both kinds share one byte budget in one ARC, so a scan of many tags
// cannot push out the manifests pulled again and again. Not-found answers
// are never cached: a manifest or tag pushed elsewhere is found at once.
// Cached manifests are shared by every request and must not be modified.
type manifestCache struct {
	ttl  time.Duration
	mu   sync.Mutex
	arc  *arc.Cache[cacheEntry]
	seed maphash.Seed
	// gens are repositories' generations, hashed into a fixed array: two
	// repositories sharing a slot only void each other's entries.
	gens [1024]atomic.Uint64
}

type cacheEntry struct {
	m   *manifest.Manifest // a manifest entry
	d   digest.Digest      // a link entry: the digest it names
	at  time.Time          // when the link was read from storage
	gen uint64             // the repository's generation before it was read
	ver string             // the repository's shared LinkVersions version, likewise
}

// Costs in bytes counted against the budget beyond the content and key:
// the parsed fields of a manifest take about as much again as its bytes.
const (
	manifestEntryCost = 256
	linkEntryCost     = 128
)

// newManifestCache returns a cache of at most size bytes whose links are
// trusted for ttl; nil when size is 0 (nothing cached).
func newManifestCache(size int64, ttl time.Duration) *manifestCache {
	if size <= 0 {
		return nil
	}
	return &manifestCache{ttl: ttl, arc: arc.New[cacheEntry](size, nil), seed: maphash.MakeSeed()}
}

func (c *manifestCache) gen(repo string) *atomic.Uint64 {
	return &c.gens[maphash.String(c.seed, repo)%uint64(len(c.gens))]
}

// generation is read before a link is read from storage and stored with it.
func (c *manifestCache) generation(repo string) uint64 { return c.gen(repo).Load() }

// changed voids repo's link entries; called after a write to its links.
func (c *manifestCache) changed(repo string) { c.gen(repo).Add(1) }

// forgetLinks voids every link entry.
func (c *manifestCache) forgetLinks() {
	for i := range c.gens {
		c.gens[i].Add(1)
	}
}

func manifestKey(d digest.Digest) string { return "m\x00" + string(d) }

// tagKey and revisionKey name link entries; NUL is in no repository name,
// tag or digest.
func tagKey(repo, tag string) string { return "t\x00" + repo + "\x00" + tag }

func revisionKey(repo string, d digest.Digest) string {
	return "r\x00" + repo + "\x00" + string(d)
}

// manifest returns the cached manifest d.
func (c *manifestCache) manifest(d digest.Digest) (*manifest.Manifest, bool) {
	c.mu.Lock()
	e, ok := c.arc.Get(manifestKey(d))
	c.mu.Unlock()
	return e.m, ok
}

func (c *manifestCache) addManifest(m *manifest.Manifest) {
	c.mu.Lock()
	c.arc.Add(manifestKey(m.Digest), cacheEntry{m: m}, int64(2*len(m.Content)+manifestEntryCost))
	c.mu.Unlock()
}

// link returns the digest a fresh link entry names, if it was read at
// shared version ver.
func (c *manifestCache) link(repo, key, ver string) (digest.Digest, bool) {
	if c.ttl <= 0 {
		return "", false
	}
	c.mu.Lock()
	e, ok := c.arc.Get(key)
	c.mu.Unlock()
	if !ok || e.gen != c.generation(repo) || e.ver != ver || time.Since(e.at) >= c.ttl {
		return "", false
	}
	return e.d, true
}

// addLink caches a link read from storage at time at, under generation gen
// and shared version ver of repo as read before the storage read.
func (c *manifestCache) addLink(key string, d digest.Digest, at time.Time, gen uint64, ver string) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	c.arc.Add(key, cacheEntry{d: d, at: at, gen: gen, ver: ver}, int64(len(key)+linkEntryCost))
	c.mu.Unlock()
}
