package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

// TestLostMetadataKeepsImages loses the bolt metadata store of deduplicated
// images (deleted, or emptied) and runs GC with nothing to protect them but
// the storage: the index is rebuilt from recipes and packs first, GC deletes
// no pack, and after a restart every image pulls byte for byte. On today's
// main of before this test, the GC deleted every pack as an orphan.
func TestLostMetadataKeepsImages(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, db string)
	}{
		{"deleted", func(t *testing.T, db string) {
			if err := os.Remove(db); err != nil {
				t.Fatal(err)
			}
		}},
		{"emptied", func(t *testing.T, db string) {
			if err := os.Truncate(db, 0); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := allLayers(t)
			a, b := all[:3], all[3:6]
			srv, cfg, _ := startDedup(t, "full", "")
			root := srv.Root
			push(t, srv, "lost/a", a)
			push(t, srv, "lost/b", b)
			waitState(t, root, all[:6], false)
			before := storedFileBytes(t, root)
			srv.Stop()

			tc.lose(t, filepath.Join(root, "cairn-meta.db"))
			// scrub trusts only a complete index: it rebuilds it first,
			// and finds nothing missing.
			if out, err := exec.Command(cairnproc.Binary(t), "scrub", "--config", cfg, "--root", root, "--quiet").CombinedOutput(); err != nil {
				t.Fatalf("scrub over a lost metadata store: %v\n%s", err, out)
			}
			rep := runGC(t, "--config", cfg, "--root", root, "--delay", "0s")
			if rep.Packs.Deleted != 0 || rep.Packs.Orphans != 0 || rep.Deleted.Blobs != 0 {
				t.Fatalf("gc over a lost metadata store deleted %+v", rep)
			}
			if after := storedFileBytes(t, root); after != before {
				t.Fatalf("file store %d bytes before, %d after gc", before, after)
			}
			srv = cairnproc.Start(t, root, "--config", cfg)
			pullAll(t, srv, "lost/a", a)
			pullAll(t, srv, "lost/b", b)
			st := stats(t, cfg, root)
			if got := layerCount(st, "deduplicated"); got != 6 {
				t.Fatalf("after the rebuild %d layers deduplicated, want 6 (stats %v)", got, st)
			}
		})
	}
}

// TestFlushedRedisKeepsImages deletes every key of the registry's Redis
// prefix (as FLUSHALL, or a restart without persistence, would) while a
// node serves: GC from the CLI rebuilds the index before it deletes
// anything and keeps every pack, the running node and a restarted one pull
// every image byte for byte.
func TestFlushedRedisKeepsImages(t *testing.T) {
	cfg := redisConfig(t, "workers: 1")
	text, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`prefix: "([^"]+)"`).FindSubmatch(text)
	if m == nil {
		t.Fatalf("no prefix in %s", text)
	}
	prefix := string(m[1])
	root := t.TempDir()
	srv := cairnproc.Start(t, root, "--config", cfg)
	all := allLayers(t)
	a, b := all[:3], all[3:6]
	push(t, srv, "flushed/a", a)
	push(t, srv, "flushed/b", b)
	waitState(t, root, all[:6], false)
	before := storedFileBytes(t, root)

	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rc.Close()
	ctx := context.Background()
	keys, err := rc.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of %s: %d, %v", prefix, len(keys), err)
	}
	if err := rc.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}

	// The first GET of a layer finds its files located nowhere: it is
	// refused before its headers (503), sets off the rebuild, and the
	// pulls then succeed, without waiting for the periodic check.
	layer := regtest.Do(t, http.DefaultClient, http.MethodGet, srv.URL+"/v2/flushed/a/blobs/"+digestOf(a[0].blob), nil)
	if layer.Status != http.StatusServiceUnavailable && !(layer.Status == http.StatusOK && digestOf(layer.Body) == digestOf(a[0].blob)) {
		t.Fatalf("GET of a layer after the flush: %d with %d bytes; want 503 or the whole layer", layer.Status, len(layer.Body))
	}
	// A shared cache in front must not keep the 503 as the blob.
	if h := layer.Header; layer.Status == http.StatusServiceUnavailable && (h.Get("Cache-Control") != "no-store" || h.Get("ETag") != "" || h.Get("Retry-After") == "") {
		t.Fatalf("503 of a layer: Cache-Control %q, ETag %q, Retry-After %q; want no-store, none, set", h.Get("Cache-Control"), h.Get("ETag"), h.Get("Retry-After"))
	}
	pullAfterRebuild(t, srv, "flushed/b", b)

	rep := runGC(t, "--config", cfg, "--root", root, "--delay", "0s")
	if rep.Packs.Deleted != 0 || rep.Packs.Orphans != 0 || rep.Deleted.Blobs != 0 {
		t.Fatalf("gc over a flushed Redis deleted %+v", rep)
	}
	if after := storedFileBytes(t, root); after != before {
		t.Fatalf("file store %d bytes before, %d after gc", before, after)
	}
	pullAll(t, srv, "flushed/a", a)
	srv.Stop()
	srv = cairnproc.Start(t, root, "--config", cfg)
	pullAll(t, srv, "flushed/a", a)
	pullAll(t, srv, "flushed/b", b)
}

// TestLostMetadataDedupOff: dedup turned off after it ran, and its bolt
// file lost: the layers it deduplicated are still served, through a
// metadata store rebuilt from storage.
func TestLostMetadataDedupOff(t *testing.T) {
	layers := allLayers(t)[:3]
	root, _ := dedupedRoot(t, "off/a", layers)
	if err := os.Remove(filepath.Join(root, "cairn-meta.db")); err != nil {
		t.Fatal(err)
	}
	off, _ := dedupConfig(t, "off", "")
	srv := cairnproc.Start(t, root, "--config", off)
	pullAfterRebuild(t, srv, "off/a", layers)
}

// pullAfterRebuild pulls repo:v1 until it succeeds byte for byte: while
// the metadata is rebuilt from storage a pull may be refused (503), never
// served wrong. The test binary's -timeout ends a wait that never ends.
func pullAfterRebuild(t *testing.T, srv *cairnproc.Server, repo string, layers []testLayer) {
	t.Helper()
	poll.Until(t, 200*time.Millisecond, func() string {
		if err := pullErr(srv, repo, layers); err != nil {
			return "a pull after the rebuild: " + err.Error()
		}
		return ""
	})
}

// TestDedupReindexCLI: `cairn dedup reindex` rebuilds a lost metadata store
// from storage and says what it read; a metadata store of another storage
// (a configuration pointing it at the wrong root) is refused in one line and
// left as it is, unless --force, which moves it aside and indexes this
// storage into a new one.
func TestDedupReindexCLI(t *testing.T) {
	all := allLayers(t)
	mine, theirs := all[:3], all[3:5]
	root, cfg := dedupedRoot(t, "reindex/mine", mine)
	db := filepath.Join(root, "cairn-meta.db")
	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	reindex := func(cfg, root string, args ...string) ([]byte, []byte, error) {
		var stderr strings.Builder
		cmd := exec.Command(cairnproc.Binary(t), append([]string{"dedup", "reindex", "--config", cfg, "--root", root}, args...)...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return out, []byte(stderr.String()), err
	}
	out, _, err := reindex(cfg, root, "--json")
	var rs struct {
		Deduplicated int  `json:"deduplicated"`
		Complete     bool `json:"complete"`
	}
	if err != nil || json.Unmarshal(out, &rs) != nil || !rs.Complete || rs.Deduplicated != dedupable(mine) {
		t.Fatalf("dedup reindex over a lost metadata store: %v, %s; want complete, %d deduplicated", err, out, dedupable(mine))
	}
	if rep := runGC(t, "--config", cfg, "--root", root, "--dry-run"); rep.DedupIndex != "complete" {
		t.Fatalf("after dedup reindex, gc --dry-run says the dedup index is %q", rep.DedupIndex)
	}

	otherRoot, _ := dedupedRoot(t, "reindex/theirs", theirs)
	wrong, _ := dedupConfig(t, "full", fmt.Sprintf("    metadata: {path: %q}\n", db))
	var ee *exec.ExitError
	out, errOut, err := reindex(wrong, otherRoot)
	if !errors.As(err, &ee) || !strings.Contains(string(errOut), "another storage") || strings.Count(strings.TrimSpace(string(errOut)), "\n") != 0 {
		t.Fatalf("dedup reindex with another storage's metadata: %v, stdout %q, stderr %q", err, out, errOut)
	}
	if rep := runGC(t, "--config", cfg, "--root", root, "--dry-run"); rep.DedupIndex != "complete" {
		t.Fatalf("a refused reindex changed the metadata: gc --dry-run says the dedup index is %q", rep.DedupIndex)
	}
	if out, errOut, err = reindex(wrong, otherRoot, "--force"); err != nil || !strings.Contains(string(errOut), "moved to") {
		t.Fatalf("dedup reindex --force: %v, stdout %q, stderr %q", err, out, errOut)
	}
	if moved, _ := filepath.Glob(db + ".foreign-*"); len(moved) != 1 {
		t.Fatalf("the other storage's metadata was not moved aside: %v", moved)
	}
	if rep := runGC(t, "--config", wrong, "--root", otherRoot, "--dry-run"); rep.DedupIndex != "complete" {
		t.Fatalf("after dedup reindex --force, gc --dry-run says the dedup index is %q", rep.DedupIndex)
	}
}

// dedupable counts the layers dedup can rebuild (not irreproducible).
func dedupable(layers []testLayer) int {
	n := 0
	for _, l := range layers {
		if !l.intact {
			n++
		}
	}
	return n
}
