package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/metatest"
	metaredis "github.com/cairn-registry/cairn/internal/meta/redis"
	"github.com/cairn-registry/cairn/internal/testutil/testenv"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"
)

// testPrefix returns a fresh key prefix and deletes every key under it when tb
// ends.
func testPrefix(tb testing.TB, addr string) string {
	tb.Helper()
	prefix := "cairn-test:" + rand.Text() + ":"
	tb.Cleanup(func() {
		ctx := context.Background()
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			tb.Errorf("scan %s*: %v", prefix, err)
		}
		for len(keys) > 0 {
			n := min(len(keys), 1000)
			if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
				tb.Errorf("delete %s*: %v", prefix, err)
				return
			}
			keys = keys[n:]
		}
	})
	return prefix
}

func openRedis(tb testing.TB, addr, prefix string) *metaredis.Store {
	tb.Helper()
	s, err := metaredis.Open(context.Background(), metaredis.Options{
		Addr:               addr,
		Prefix:             prefix,
		MaxLayersPerClient: metatest.MaxLayersPerClient,
		PopularityBucket:   metatest.PopularityBucket,
		PopularityBuckets:  metatest.PopularityBuckets,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// freshStore opens a store on a fresh prefix, closed when tb ends, and
// returns it with the server's address and the prefix, for tests that look
// under it or open a second node.
func freshStore(tb testing.TB) (s *metaredis.Store, addr, prefix string) {
	tb.Helper()
	addr = testenv.RedisAddr(tb)
	prefix = testPrefix(tb, addr)
	s = openRedis(tb, addr, prefix)
	tb.Cleanup(func() { s.Close() })
	return s, addr, prefix
}

// rawClient is a plain client of the server at addr, closed when tb ends.
func rawClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { c.Close() })
	return c
}

// fileField is a sha256 file's field in the files hash: its raw hash.
func fileField(t *testing.T, d digest.Digest) string {
	t.Helper()
	raw, err := hex.DecodeString(d.Encoded())
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestRedisConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	metatest.Run(t, func(t *testing.T) meta.Store {
		return openRedis(t, addr, testPrefix(t, addr))
	})
}

// TestRedisSharedNodes: two stores on one prefix, as two cairn nodes, see one
// index and count each layer once however the adds race between them.
func TestRedisSharedNodes(t *testing.T) {
	ctx := context.Background()
	a, addr, prefix := freshStore(t)
	b := openRedis(t, addr, prefix)
	defer b.Close()
	files := []digest.Digest{metatest.Digest("f1"), metatest.Digest("f2")}
	var wg sync.WaitGroup
	var mu sync.Mutex
	writes := 0
	for i := range 16 {
		node := []*metaredis.Store{a, b}[i%2]
		wg.Go(func() {
			refs, err := node.AddLayerRefs(ctx, metatest.Digest(fmt.Sprintf("layer-%d", i/2)), files)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range refs {
				if r.Write {
					writes++
				}
			}
		})
	}
	wg.Wait()
	if writes != len(files) {
		t.Fatalf("the nodes were told to write %d times, want %d", writes, len(files))
	}
	for _, node := range []*metaredis.Store{a, b} {
		fi, err := node.Files(ctx, files)
		if err != nil || fi[0].Refs != 8 || fi[1].Refs != 8 {
			t.Fatalf("Files = %+v, %v; want 8 refs each on both nodes", fi, err)
		}
	}
	l := metatest.Digest("layer-0")
	if err := a.PutLayer(ctx, l, []byte("r"), meta.StateDeduplicated); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ListLayers(ctx, meta.StateDeduplicated, "", 10); err != nil || !slices.Equal(got, []digest.Digest{l}) {
		t.Fatalf("other node's ListLayers = %v, %v", got, err)
	}
	now := time.Unix(1_700_000_000, 0)
	if _, err := a.RecordPull(ctx, "alice", l, now); err != nil {
		t.Fatal(err)
	}
	if prev, err := b.RecordPull(ctx, "alice", l, now.Add(time.Second)); err != nil || prev != 1 {
		t.Fatalf("pull on the other node: prev = %d, %v; want 1", prev, err)
	}
}

// TestRedisSharedLease: two stores on one prefix, as two cairn nodes, see one
// lease; a store on another prefix (another registry) has its own.
func TestRedisSharedLease(t *testing.T) {
	ctx := context.Background()
	a, addr, prefix := freshStore(t)
	b := openRedis(t, addr, prefix)
	defer b.Close()
	other := openRedis(t, addr, testPrefix(t, addr))
	defer other.Close()
	try := func(s *metaredis.Store, holder string) bool {
		t.Helper()
		ok, err := s.TryLease(ctx, "dedup:layer", holder, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !try(a, "node-a") {
		t.Fatal("node a did not get a free lease")
	}
	if try(b, "node-b") {
		t.Fatal("node b took the lease node a holds")
	}
	if !try(other, "node-b") {
		t.Fatal("a store on another prefix shares the lease")
	}
	if err := a.ReleaseLease(ctx, "dedup:layer", "node-a"); err != nil {
		t.Fatal(err)
	}
	if !try(b, "node-b") {
		t.Fatal("node b did not get the lease node a released")
	}
}

// TestRedisScriptsReloaded: a server that lost its scripts (restart, SCRIPT FLUSH)
// is sent them again, by single steps and by pipelined bulk steps.
func TestRedisScriptsReloaded(t *testing.T) {
	ctx := context.Background()
	s, addr, _ := freshStore(t)
	c := rawClient(t, addr)
	f := metatest.Digest("f")
	layers := []digest.Digest{metatest.Digest("l1"), metatest.Digest("l2")}
	for _, l := range layers {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddLayerRefs(ctx, l, []digest.Digest{f}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	zeroed, err := s.ReleaseLayers(ctx, layers)
	if err != nil || !slices.Equal(zeroed, []digest.Digest{f}) {
		t.Fatalf("ReleaseLayers after SCRIPT FLUSH = %v, %v; want [f]", zeroed, err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.TombstoneFiles(ctx, zeroed); err != nil || !slices.Equal(got, zeroed) {
		t.Fatalf("TombstoneFiles after SCRIPT FLUSH = %v, %v", got, err)
	}
}

func TestRedisReleaseLayersInconsistent(t *testing.T) {
	ctx := context.Background()
	s, addr, prefix := freshStore(t)
	rc := rawClient(t, addr)
	metatest.ReleaseLayersInconsistent(t, s, func(t *testing.T, d digest.Digest) {
		if n, err := rc.HDel(ctx, prefix+"files", fileField(t, d)).Result(); err != nil || n != 1 {
			t.Fatalf("HDEL = %d, %v", n, err)
		}
	})
}

func TestRedisOldFileEntries(t *testing.T) {
	ctx := context.Background()
	s, addr, prefix := freshStore(t)
	rc := rawClient(t, addr)
	metatest.OldFileEntries(t, s, func(t *testing.T, d digest.Digest, refs int64) {
		// Before packs a file's value was refs*8 + flags alone.
		if err := rc.HSet(ctx, prefix+"files", fileField(t, d), refs*8).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestOpenRedisRefusesEviction: a server that may evict any key would lose
// reference counts, so the store refuses it.
func TestOpenRedisRefusesEviction(t *testing.T) {
	ctx := context.Background()
	addr := testenv.RedisAddr(t)
	c := rawClient(t, addr)
	old, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.ConfigSet(ctx, "maxmemory-policy", old["maxmemory-policy"]).Err(); err != nil {
			t.Error(err)
		}
	}()
	s, err := metaredis.Open(ctx, metaredis.Options{Addr: addr, Prefix: testPrefix(t, addr)})
	if err == nil {
		s.Close()
		t.Fatal("Open of a server with maxmemory-policy allkeys-lru succeeded")
	}
	if !strings.Contains(err.Error(), "allkeys-lru") {
		t.Fatalf("error %q does not name the policy", err)
	}
}

func TestOpenRedisUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := metaredis.Open(ctx, metaredis.Options{Addr: addr})
	if err == nil {
		s.Close()
		t.Fatalf("Open of a closed port succeeded")
	}
	if !strings.Contains(err.Error(), addr) {
		t.Fatalf("error %q does not name the address %s", err, addr)
	}
}

// BenchmarkRedisAddLayerRefs: see metatest.BenchAddLayerRefs.
func BenchmarkRedisAddLayerRefs(b *testing.B) {
	s, _, _ := freshStore(b)
	metatest.BenchAddLayerRefs(b, s)
}
