package config

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

// metric sums the samples of the metric family name whose labels hold
// every one of labels (`cache="blobdescriptor"`, ...), from the debug
// listener at debug.
func metric(t *testing.T, debug, name string, labels ...string) float64 {
	t.Helper()
	r := regtest.Do(t, hc, http.MethodGet, "http://"+debug+"/metrics", nil)
	sum := 0.0
lines:
	for _, l := range strings.Split(string(r.Body), "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		for _, lb := range labels {
			if !strings.Contains(l, lb) {
				continue lines
			}
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q", l)
		}
		sum += v
	}
	return sum
}

// Two nodes on one storage share storage.cache.blobdescriptor: redis
// through the redis section: a descriptor one node learnt answers the
// other's HEAD without a storage call, and a DELETE through one node is
// forgotten by both.
func TestRedisDescriptorCacheSharedByTwoNodes(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := objstore.RandomName("cairn-test-") + ":"
	root := t.TempDir()
	node := func() (*cairnproc.Server, string) {
		debug := cairnproc.FreeAddr(t)
		cfg := fmt.Sprintf(`redis:
  addrs: [%s]
  db: 0
  dialtimeout: 5s
  readtimeout: 5s
  writetimeout: 5s
  maxidleconns: 4
  poolsize: 8
  connmaxidletime: 300s
  prefix: %q
storage:
  cache:
    blobdescriptor: redis
  maintenance:
    uploadpurging:
      enabled: false
http:
  debug:
    addr: %s
`, addr, prefix, debug)
		return cairnproc.Start(t, root, "--config", cairnproc.WriteConfig(t, cfg)), debug
	}
	a, _ := node()
	b, debugB := node()

	img := regtest.RandomImage(t, 1, 4096)
	if err := remote.Write(regtest.Ref(t, a.Addr, "shared/app:v1"), img); err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	blobPath := "/v2/shared/app/blobs/" + ld.String()

	if r := regtest.Do(t, hc, http.MethodHead, a.URL+blobPath, nil); r.Status != http.StatusOK {
		t.Fatalf("HEAD through a: %v", r)
	}
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	key := prefix + "blobdesc:shared/app@" + ld.String()
	size, _ := layers[0].Size()
	if v, err := rc.Get(context.Background(), key).Result(); err != nil || v != strconv.FormatInt(size, 10) {
		t.Fatalf("redis %s = %q, %v; want the layer's size %d", key, v, err, size)
	}

	opsBefore := metric(t, debugB, "cairn_storage_operations_total")
	hitsBefore := metric(t, debugB, "cairn_cache_requests_total", `cache="blobdescriptor"`, `result="hit"`)
	r := regtest.Do(t, hc, http.MethodHead, b.URL+blobPath, nil)
	if r.Status != http.StatusOK || r.Header.Get("Content-Length") != strconv.FormatInt(size, 10) {
		t.Fatalf("HEAD through b: %v, Content-Length %q", r, r.Header.Get("Content-Length"))
	}
	if ops := metric(t, debugB, "cairn_storage_operations_total") - opsBefore; ops != 0 {
		t.Errorf("b's HEAD made %v storage calls; the descriptor a cached should have answered it", ops)
	}
	if hits := metric(t, debugB, "cairn_cache_requests_total", `cache="blobdescriptor"`, `result="hit"`) - hitsBefore; hits != 1 {
		t.Errorf("b counted %v descriptor cache hits, want 1", hits)
	}
	// A GET through b streams the right bytes from the cached descriptor.
	want, _ := img.Digest()
	if err := regtest.CheckPull(t.Context(), regtest.Ref(t, b.Addr, "shared/app:v1"), want.String()); err != nil {
		t.Errorf("pull through b: %v", err)
	}

	// DELETE through b; a's next HEAD must not believe the cache.
	if r := regtest.Do(t, hc, http.MethodDelete, b.URL+blobPath, nil); r.Status != http.StatusAccepted {
		t.Fatalf("DELETE through b: %v", r)
	}
	if n, _ := rc.Exists(context.Background(), key).Result(); n != 0 {
		t.Errorf("the DELETE left %s in redis", key)
	}
	if r := regtest.Do(t, hc, http.MethodHead, a.URL+blobPath, nil); r.Status != http.StatusNotFound {
		t.Errorf("HEAD through a after b's DELETE: %v, want 404", r)
	}
}

// The dedup metadata store may use the redis section's connection: with
// storage.dedup.metadata.redis naming only a prefix, deduplicated layers'
// metadata lands on that server.
func TestDedupMetadataOnRedisSection(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := objstore.RandomName("cairn-test-") + ":"
	s := serve(t, fmt.Sprintf(`redis:
  addrs: [%s]
storage:
  dedup:
    mode: index
    metadata:
      redis:
        prefix: %q
`, addr, prefix))
	img := regtest.RandomImage(t, 1, 64<<10)
	if err := remote.Write(regtest.Ref(t, s.Addr, "dd/app:v1"), img); err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	eventually(t, "dedup metadata in redis", func() (bool, string) {
		keys, err := rc.Keys(context.Background(), prefix+"*").Result()
		n, _ := rc.HLen(context.Background(), prefix+"files").Result()
		return err == nil && n > 0, fmt.Sprintf("keys %q, %d files, %v", keys, n, err)
	})
}
