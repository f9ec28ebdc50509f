// Package linkversion counts, in Redis, the writes to each repository's
// tag and revision links, so that every node sharing a storage and a Redis
// server sees a link write by any node at once. A node caches the links it
// reads (registry's manifest cache) together with the version it read
// before them, and trusts an entry only while the version is unchanged: a
// writer bumps the version after its storage write, so a node that read
// the old version re-reads storage. A garbage collection, which deletes
// links of many repositories, bumps one version all repositories share.
//
// Redis down must not slow serving: after a failed command the versions
// count as unreadable for a few seconds, without asking (the caller then
// reads links from storage, and a writer's bump is lost: the other nodes
// see its write within the TTL).
//
// Without Redis the nodes know nothing of each other's writes and trust
// their entries for the tag TTL; with it the TTL remains an upper bound
// (a writer that died between its storage write and its bump).
package linkversion

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis keeps the versions under prefix + "links:".
type Redis struct {
	c      redis.UniversalClient
	prefix string
	// downUntil (Unix nanoseconds) is when Redis is asked again after a
	// failure; downFor is how long that is (tests lengthen it).
	downUntil atomic.Int64
	downFor   time.Duration
}

// downFor is how long a failure keeps Redis from being asked; timeout
// bounds each command (a Redis beside the nodes answers in a millisecond;
// one that does not is better skipped than waited for).
const (
	downFor = 5 * time.Second
	timeout = 250 * time.Millisecond
)

// ErrDown is returned while Redis is not asked after a failure.
var ErrDown = errors.New("linkversion: redis failed within the last seconds")

func (r *Redis) check() error {
	if time.Now().UnixNano() < r.downUntil.Load() {
		return ErrDown
	}
	return nil
}

// failed marks Redis down after err (nil: no failure).
func (r *Redis) failed(err error) error {
	if err != nil {
		r.downUntil.Store(time.Now().Add(r.downFor).UnixNano())
	}
	return err
}

// New returns the versions kept in c under keys starting with prefix; c
// should honour context deadlines (ContextTimeoutEnabled) and not retry.
func New(c redis.UniversalClient, prefix string) *Redis {
	return &Redis{c: c, prefix: prefix + "links:", downFor: downFor}
}

// allKey is the version every repository shares; repository names hold no
// '*', so it is no repository's key.
func (r *Redis) allKey() string { return r.prefix + "*" }

func (r *Redis) repoKey(repo string) string { return r.prefix + "repo:" + repo }

// Version returns repo's version: its own count and the shared one, read
// in one round trip (a pipeline, not MGET, so that each key may live on
// its own node of a cluster).
func (r *Redis) Version(ctx context.Context, repo string) (string, error) {
	if err := r.check(); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var own, all *redis.StringCmd
	r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		own, all = p.Get(ctx, r.repoKey(repo)), p.Get(ctx, r.allKey())
		return nil
	})
	// A key never bumped is missing (redis.Nil) and reads as "".
	for _, c := range []*redis.StringCmd{own, all} {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return "", r.failed(fmt.Errorf("linkversion: reading %s: %w", repo, err))
		}
	}
	return own.Val() + "/" + all.Val(), nil
}

// Bump marks a write to repo's links; called after the write.
func (r *Redis) Bump(ctx context.Context, repo string) error {
	return r.incr(ctx, r.repoKey(repo))
}

// BumpAll marks a write to the links of any repository (a GC run).
func (r *Redis) BumpAll(ctx context.Context) error {
	return r.incr(ctx, r.allKey())
}

func (r *Redis) incr(ctx context.Context, key string) error {
	if err := r.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := r.c.Incr(ctx, key).Err(); err != nil {
		return r.failed(fmt.Errorf("linkversion: bumping %s: %w", key, err))
	}
	return nil
}
