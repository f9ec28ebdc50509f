package blobcache

import (
	"context"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

type forgetCache interface {
	Lookup(context.Context, string, digest.Digest) (int64, bool)
	Remember(context.Context, string, digest.Digest, int64)
	Forget(context.Context, string, digest.Digest)
	ForgetBlobs(context.Context, []digest.Digest) error
}

// exerciseForgetBlobs: ForgetBlobs drops a digest in every repository it
// was remembered for, and nothing else.
func exerciseForgetBlobs(t *testing.T, c forgetCache) {
	t.Helper()
	gone, kept := digest.FromString("gone"), digest.FromString("kept")
	for _, repo := range []string{"a/b", "a/c", "d"} {
		c.Remember(ctx, repo, gone, 1)
	}
	c.Remember(ctx, "a/b", gone, 2) // again: one entry still
	c.Remember(ctx, "a/b", kept, 3)
	c.Forget(ctx, "d", gone) // forgotten alone first: no harm
	if err := c.ForgetBlobs(ctx, []digest.Digest{gone, digest.FromString("never cached")}); err != nil {
		t.Fatal(err)
	}
	for _, repo := range []string{"a/b", "a/c", "d"} {
		if _, ok := c.Lookup(ctx, repo, gone); ok {
			t.Errorf("%s@%s survived ForgetBlobs", repo, gone)
		}
	}
	if size, ok := c.Lookup(ctx, "a/b", kept); !ok || size != 3 {
		t.Errorf("Lookup of another digest = %d, %v", size, ok)
	}
	// Remembered again afterwards: cached, and forgotten again.
	c.Remember(ctx, "a/c", gone, 4)
	if size, ok := c.Lookup(ctx, "a/c", gone); !ok || size != 4 {
		t.Errorf("Lookup after remembering again = %d, %v", size, ok)
	}
	if err := c.ForgetBlobs(ctx, []digest.Digest{gone}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Lookup(ctx, "a/c", gone); ok {
		t.Error("hit after the second ForgetBlobs")
	}
	if err := c.ForgetBlobs(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryForgetBlobs(t *testing.T) {
	m := NewMemory(10, time.Hour, nil)
	exerciseForgetBlobs(t, m)
	// What leaves the cache leaves the index: evictions, expiry, Forget.
	b := NewMemory(2, time.Hour, nil)
	for i := range 50 {
		b.Remember(ctx, "r", digest.FromString(string(rune('a'+i))), 1)
	}
	b.Forget(ctx, "r", digest.FromString(string(rune('a'+49))))
	if n := len(b.repos); n != 1 {
		t.Errorf("the index holds %d digests; the cache holds 1", n)
	}
}

func TestRedisForgetBlobs(t *testing.T) {
	addr := testenv.RedisAddr(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	prefix := "blobcache-test-" + time.Now().Format("150405.000000000") + ":"
	r := NewRedis(c, prefix, time.Hour, nil)
	exerciseForgetBlobs(t, r)
	// Nothing of the forgotten digest is left behind, and the set of the
	// kept one expires.
	gone, kept := digest.FromString("gone"), digest.FromString("kept")
	if n, err := c.Exists(ctx, prefix+"blobdesc:repos:"+gone.String()).Result(); err != nil || n != 0 {
		t.Errorf("the set of a forgotten digest: exists %d, %v", n, err)
	}
	if ttl, err := c.TTL(ctx, prefix+"blobdesc:repos:"+kept.String()).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
		t.Errorf("TTL of the set = %v, %v; want up to 1h", ttl, err)
	}
	keys, _ := c.Keys(ctx, prefix+"*").Result()
	if len(keys) > 0 {
		c.Del(ctx, keys...)
	}
}
