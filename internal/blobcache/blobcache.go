// Package blobcache caches blob descriptors, distribution's
// storage.cache.blobdescriptor: that blob d is linked into repository repo
// and holds size bytes, so that a HEAD or GET of a blob skips the link read
// and the stat. In memory (one process, ARC-bounded in entries) or in Redis
// (shared by every node on the same storage).
//
// An entry is a hint with a lifetime, never a guarantee: a DELETE through
// any node sharing the cache forgets the entry at once, and a garbage
// collection forgets, in every repository, each digest whose blob or link
// it deleted (ForgetBlobs: in Redis for every node; in memory only within
// the process that runs it). What nothing forgets is dropped when its
// entry expires, when a GET finds the data gone, or when a manifest PUT
// finds the blob missing. Writers never consult the cache: what a push or a
// mount relies on is read from storage.
package blobcache

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/arc"
)

// Observer counts lookups (metrics.Metrics.CacheLookup implements it).
type Observer func(cache string, hit bool)

// metricName labels the cache's lookups.
const metricName = "blobdescriptor"

func key(repo string, d digest.Digest) string { return repo + "@" + string(d) }

// splitKey undoes key: neither repository names nor digests hold an '@'.
func splitKey(k string) (repo string, d digest.Digest) {
	i := strings.LastIndexByte(k, '@')
	return k[:i], digest.Digest(k[i+1:])
}

// Memory is the inmemory cache.
type Memory struct {
	ttl     time.Duration
	observe Observer

	mu  sync.Mutex
	arc *arc.Cache[memEntry]
	// repos lists the repositories each digest has an entry for, so that
	// ForgetBlobs finds them without a scan; kept in step by evicted.
	repos map[digest.Digest][]string
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
	m := &Memory{ttl: ttl, observe: observe, repos: make(map[digest.Digest][]string)}
	m.arc = arc.New[memEntry](capacity, m.evicted)
	return m
}

// evicted drops an entry that left the ARC (evicted, removed or replaced)
// from repos; called with mu held.
func (m *Memory) evicted(k string, _ memEntry) {
	repo, d := splitKey(k)
	rs := m.repos[d]
	i := slices.Index(rs, repo)
	switch {
	case i < 0:
	case len(rs) == 1:
		delete(m.repos, d)
	default:
		rs[i] = rs[len(rs)-1]
		m.repos[d] = rs[:len(rs)-1]
	}
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
	// A replaced entry left repos through evicted: add it back.
	if m.arc.Add(key(repo, d), memEntry{size: size, expires: time.Now().Add(m.ttl)}, 1) {
		m.repos[d] = append(m.repos[d], repo)
	}
	m.mu.Unlock()
}

// Forget drops what is cached about blob d in repo.
func (m *Memory) Forget(_ context.Context, repo string, d digest.Digest) {
	m.mu.Lock()
	m.arc.Remove(key(repo, d))
	m.mu.Unlock()
}

// ForgetBlobs drops what is cached about the digests in every repository
// (gc.BlobForgetter). It never fails.
func (m *Memory) ForgetBlobs(_ context.Context, ds []digest.Digest) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range ds {
		rs := m.repos[d]
		// Out of repos first: evicted, called by Remove, then finds
		// nothing to do.
		delete(m.repos, d)
		for _, repo := range rs {
			m.arc.Remove(key(repo, d))
		}
	}
	return nil
}

func (m *Memory) seen(hit bool) {
	if m.observe != nil {
		m.observe(metricName, hit)
	}
}

// Redis is the cache in Redis, shared by every node that uses the same
// server and prefix. Errors talking to Redis count as misses (and are
// otherwise ignored): the cache only saves storage reads. Beside each
// entry (a string, prefix+"blobdesc:"+repo+"@"+digest), a set
// (prefix+"blobdesc:repos:"+digest) names the repositories a digest was
// remembered for, so that ForgetBlobs reaches them without a SCAN; it
// expires with the latest entry.
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
	// One round trip; MULTI so that the set never outlives its TTL.
	r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.prefix+key(repo, d), strconv.FormatInt(size, 10), r.ttl)
		p.SAdd(ctx, r.reposKey(d), repo)
		p.PExpire(ctx, r.reposKey(d), r.ttl)
		return nil
	})
}

// reposKey names the set of the repositories d was remembered for.
func (r *Redis) reposKey(d digest.Digest) string { return r.prefix + "repos:" + string(d) }

// Forget drops what is cached about blob d in repo. The repository stays
// in d's set: ForgetBlobs deletes a missing key at no harm.
func (r *Redis) Forget(ctx context.Context, repo string, d digest.Digest) {
	r.c.Del(ctx, r.prefix+key(repo, d))
}

// ForgetBlobs drops what is cached about the digests in every repository,
// for every node (gc.BlobForgetter): one pipeline reads their sets, one
// more deletes the entries and takes the repositories read out of the sets
// (a repository remembered meanwhile stays, for a later ForgetBlobs).
// Pipelines, not a script, so that each command goes to its key's node in
// a cluster.
func (r *Redis) ForgetBlobs(ctx context.Context, ds []digest.Digest) error {
	if len(ds) == 0 {
		return nil
	}
	sets := make([]*redis.StringSliceCmd, len(ds))
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, d := range ds {
			sets[i] = p.SMembers(ctx, r.reposKey(d))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("blobcache: reading the repositories of %d digests: %w", len(ds), err)
	}
	_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, d := range ds {
			repos := sets[i].Val()
			if len(repos) == 0 {
				continue
			}
			members := make([]any, len(repos))
			for j, repo := range repos {
				// One key per DEL: a cluster refuses keys of several slots.
				p.Del(ctx, r.prefix+key(repo, d))
				members[j] = repo
			}
			p.SRem(ctx, r.reposKey(d), members...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("blobcache: forgetting %d digests: %w", len(ds), err)
	}
	return nil
}
