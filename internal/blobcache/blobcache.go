// Package blobcache caches blob descriptors, distribution's
// storage.cache.blobdescriptor: that blob d is linked into repository repo
// and holds size bytes, so that a HEAD or GET of a blob skips the link read
// and the stat. In memory (one process, ARC-bounded in entries) or in Redis
// (shared by every node on the same storage).
//
// An entry is a hint with a lifetime, never a guarantee: a DELETE through
// any node sharing the cache forgets the entry at once, while blobs a
// garbage collection deleted are forgotten when their entry expires, or
// when a GET finds the data gone. Writers never consult the cache: what a
// push or a mount relies on is read from storage.
package blobcache

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/dedup/cache"
)

// Observer counts lookups (metrics.Metrics.CacheLookup implements it).
type Observer func(cache string, hit bool)

// metricName labels the cache's lookups.
const metricName = "blobdescriptor"

func key(repo string, d digest.Digest) string { return repo + "@" + string(d) }

// Memory is the inmemory cache.
type Memory struct {
	ttl     time.Duration
	observe Observer

	mu  sync.Mutex
	arc *cache.ARC[memEntry]
}

type memEntry struct {
	size    int64
	expires time.Time
}

// unbounded stands for blobdescriptorsize 0: no limit on entries.
const unbounded = 1 << 62

// NewMemory returns a cache of at most entries descriptors (0: unbounded),
// each trusted for ttl.
func NewMemory(entries int, ttl time.Duration, observe Observer) *Memory {
	capacity := int64(entries)
	if entries == 0 {
		capacity = unbounded
	}
	return &Memory{ttl: ttl, observe: observe, arc: cache.NewARC[memEntry](capacity, nil)}
}

// Lookup returns blob d's size when it is cached as linked into repo.
func (m *Memory) Lookup(_ context.Context, repo string, d digest.Digest) (int64, bool) {
	k := key(repo, d)
	m.mu.Lock()
	e, ok := m.arc.Get(k)
	if ok && time.Now().After(e.expires) {
		m.arc.Remove(k)
		ok = false
	}
	m.mu.Unlock()
	m.seen(ok)
	return e.size, ok
}

// Remember caches that blob d of size bytes is linked into repo.
func (m *Memory) Remember(_ context.Context, repo string, d digest.Digest, size int64) {
	m.mu.Lock()
	m.arc.Add(key(repo, d), memEntry{size: size, expires: time.Now().Add(m.ttl)}, 1)
	m.mu.Unlock()
}

// Forget drops what is cached about blob d in repo.
func (m *Memory) Forget(_ context.Context, repo string, d digest.Digest) {
	m.mu.Lock()
	m.arc.Remove(key(repo, d))
	m.mu.Unlock()
}

func (m *Memory) seen(hit bool) {
	if m.observe != nil {
		m.observe(metricName, hit)
	}
}

// Redis is the cache in Redis, shared by every node that uses the same
// server and prefix. Errors talking to Redis count as misses (and are
// otherwise ignored): the cache only saves storage reads.
type Redis struct {
	c       redis.UniversalClient
	prefix  string
	ttl     time.Duration
	observe Observer
}

// NewRedis returns the cache over c; keys start with prefix + "blobdesc:".
func NewRedis(c redis.UniversalClient, prefix string, ttl time.Duration, observe Observer) *Redis {
	return &Redis{c: c, prefix: prefix + "blobdesc:", ttl: ttl, observe: observe}
}

// Lookup returns blob d's size when it is cached as linked into repo.
func (r *Redis) Lookup(ctx context.Context, repo string, d digest.Digest) (int64, bool) {
	v, err := r.c.Get(ctx, r.prefix+key(repo, d)).Result()
	size, perr := strconv.ParseInt(v, 10, 64)
	hit := err == nil && perr == nil && size >= 0
	if r.observe != nil {
		r.observe(metricName, hit)
	}
	return size, hit
}

// Remember caches that blob d of size bytes is linked into repo.
func (r *Redis) Remember(ctx context.Context, repo string, d digest.Digest, size int64) {
	r.c.Set(ctx, r.prefix+key(repo, d), strconv.FormatInt(size, 10), r.ttl)
}

// Forget drops what is cached about blob d in repo.
func (r *Redis) Forget(ctx context.Context, repo string, d digest.Digest) {
	r.c.Del(ctx, r.prefix+key(repo, d))
}
