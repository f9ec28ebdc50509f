package blobcache

import (
	"context"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

var ctx = context.Background()

// exercise runs what both caches must do: remember per repository, forget,
// and count hits and misses.
func exercise(t *testing.T, c interface {
	Lookup(context.Context, string, digest.Digest) (int64, bool)
	Remember(context.Context, string, digest.Digest, int64)
	Forget(context.Context, string, digest.Digest)
}, hits, misses *int) {
	d := digest.FromString("blob")
	if _, ok := c.Lookup(ctx, "a/b", d); ok {
		t.Fatal("hit in an empty cache")
	}
	c.Remember(ctx, "a/b", d, 42)
	if size, ok := c.Lookup(ctx, "a/b", d); !ok || size != 42 {
		t.Fatalf("Lookup = %d, %v", size, ok)
	}
	if _, ok := c.Lookup(ctx, "a/c", d); ok {
		t.Fatal("a blob linked into a/b is not linked into a/c")
	}
	c.Forget(ctx, "a/b", d)
	if _, ok := c.Lookup(ctx, "a/b", d); ok {
		t.Fatal("hit after Forget")
	}
	if *hits != 1 || *misses != 3 {
		t.Errorf("counted %d hits, %d misses; want 1, 3", *hits, *misses)
	}
}

func counter(hits, misses *int) Observer {
	return func(name string, hit bool) {
		if name != "blobdescriptor" {
			panic(name)
		}
		if hit {
			*hits++
		} else {
			*misses++
		}
	}
}

func TestMemory(t *testing.T) {
	var hits, misses int
	exercise(t, NewMemory(10, time.Hour, counter(&hits, &misses)), &hits, &misses)
}

func TestMemoryBoundAndExpiry(t *testing.T) {
	m := NewMemory(2, time.Hour, nil)
	for i := range 3 {
		m.Remember(ctx, "r", digest.FromString(string(rune('a'+i))), int64(i))
	}
	n := 0
	for i := range 3 {
		if _, ok := m.Lookup(ctx, "r", digest.FromString(string(rune('a'+i)))); ok {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d entries held, bound 2", n)
	}
	// An entry older than the TTL is a miss: a TTL of 1ns has always
	// passed by the time Lookup runs.
	e := NewMemory(0, time.Nanosecond, nil)
	e.Remember(ctx, "r", digest.FromString("x"), 1)
	if _, ok := e.Lookup(ctx, "r", digest.FromString("x")); ok {
		t.Error("an expired entry was a hit")
	}
}

func TestRedis(t *testing.T) {
	addr := testenv.RedisAddr(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	prefix := "blobcache-test-" + time.Now().Format("150405.000000000") + ":"
	var hits, misses int
	r := NewRedis(c, prefix, time.Hour, counter(&hits, &misses))
	exercise(t, r, &hits, &misses)
	// The entry expires in Redis.
	d := digest.FromString("ttl")
	r.Remember(ctx, "a/b", d, 7)
	if ttl, err := c.TTL(ctx, prefix+"blobdesc:a/b@"+d.String()).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
		t.Errorf("TTL = %v, %v; want up to 1h", ttl, err)
	}
	c.Del(ctx, prefix+"blobdesc:a/b@"+d.String())
}
