package dedup

import (
	"archive/tar"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/layertest"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// Issue 23: the preconstruct cache serves or steps aside, it never cuts a
// pull. Before, a GET of a deduplicated layer whose cache volume was full
// answered 200 with its body cut where the volume filled (nothing logged,
// nothing counted), and one whose cache volume was read-only answered 500.

// bigRandomLayer is a gzip layer of about 13 MB whose files are random, so
// it does not fit a 4 MiB volume however it is compressed.
func bigRandomLayer(t *testing.T) testLayer {
	t.Helper()
	w := layertest.NewWriter(t, tar.FormatPAX, time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC))
	const n = 3_250_000
	for i := range 4 {
		w.Add(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("data/blob-%d.bin", i), Mode: 0o644, Size: n}, content(uint64(2*i+1001), n))
	}
	return testLayer{name: "big", mediaType: mtGzip, blob: gzipStd(t, w.Close(), 6)}
}

// mountTmpfs mounts a tmpfs of size (mount's -o size=) on a new temp dir
// and unmounts it when the test ends (after the server stopped: cleanups
// run last registered first). Without the rights to mount it skips, except
// in CI.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs: %v: %s", err, out)
		}
		t.Skipf("mount tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

func remountReadOnly(t *testing.T, dir string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s read-only: %v: %s", dir, err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "probe"), nil, 0o644); err == nil {
		t.Fatalf("%s is still writable after the remount", dir)
	}
}

// getWhole GETs blob l of repo in full, n times at once, and fails unless
// each answered 200 with every byte (a cut body is a read error: the
// Content-Length is not reached).
func getWhole(t *testing.T, url string, l testLayer, n int) {
	t.Helper()
	// A hang guard only: a restore on two busy cores is slow, not wrong.
	client := &http.Client{Timeout: 5 * time.Minute}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := client.Get(url)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			switch {
			case resp.StatusCode != http.StatusOK:
				errs[i] = fmt.Errorf("status %d: %s", resp.StatusCode, b)
			case err != nil:
				errs[i] = fmt.Errorf("status 200, body cut after %d of %d bytes: %w", len(b), len(l.blob), err)
			case digestOf(b) != digestOf(l.blob):
				errs[i] = fmt.Errorf("status 200, %d bytes of digest %s, want %d bytes of %s", len(b), digestOf(b), len(l.blob), digestOf(l.blob))
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("GET %d of %d: %v", i+1, n, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// startWithCache starts a full-mode server whose preconstruct cache is dir,
// pushes the big layer and waits until its intact copy is gone.
func startWithCache(t *testing.T, dir string) (url, debug string, l testLayer, logs func() string) {
	t.Helper()
	l = bigRandomLayer(t)
	srv, _, debug := startDedup(t, "full", fmt.Sprintf("    cache:\n      preconstruct: {dir: %q}\n", dir))
	push(t, srv, "cache/big", []testLayer{l})
	waitState(t, srv.Root, []testLayer{l}, false)
	return srv.URL + "/v2/cache/big/blobs/" + digestOf(l.blob), debug, l, srv.Logs
}

// TestCacheFullVolumeStepsAside: a 13 MB layer on a 4 MiB cache volume.
// Every GET gets every byte; the cache declined the entry (it would not
// leave the volume's margin free), counted.
func TestCacheFullVolumeStepsAside(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	url, debug, l, _ := startWithCache(t, dir)
	getWhole(t, url, l, 2)
	series := `cairn_dedup_cache_write_failures_total{cache="preconstruct",reason="declined"}`
	if got := regtest.Metric(t, debug, series); got < 1 {
		t.Fatalf("%s = %v, want at least 1", series, got)
	}
	if got := regtest.Metric(t, debug, `cairn_dedup_rebuild_failures_total{reason="other"}`); got != 0 {
		t.Fatalf("a cache that stepped aside counted as a failed rebuild: %v", got)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".partial") {
			t.Fatalf("partial file left in the cache: %s", e.Name())
		}
	}
}

// TestCacheReadOnlyVolumeStepsAside: the cache's volume turns read-only
// while the server runs. Every GET gets every byte; the failed create is
// logged once per GET with its cause and counted.
func TestCacheReadOnlyVolumeStepsAside(t *testing.T) {
	dir := mountTmpfs(t, "64m")
	url, debug, l, logs := startWithCache(t, dir)
	remountReadOnly(t, dir)
	getWhole(t, url, l, 2)
	series := `cairn_dedup_cache_write_failures_total{cache="preconstruct",reason="read_only"}`
	if got := regtest.Metric(t, debug, series); got != 2 {
		t.Fatalf("%s = %v, want 2 (one per GET)", series, got)
	}
	if n := strings.Count(logs(), "read-only file system"); n != 2 {
		t.Fatalf("%d log lines name the read-only volume, want 2 (one per GET):\n%s", n, logs())
	}
}

// TestCacheDirUnusableAtStart: a cache directory that cannot be created
// (under a read-only volume) leaves the cache off, logged; serve runs and
// restores stream without it.
func TestCacheDirUnusableAtStart(t *testing.T) {
	vol := mountTmpfs(t, "64m")
	remountReadOnly(t, vol)
	url, _, l, logs := startWithCache(t, filepath.Join(vol, "preconstruct"))
	getWhole(t, url, l, 2)
	if !strings.Contains(logs(), "preconstruct cache off") {
		t.Fatalf("the cache being off is not logged:\n%s", logs())
	}
}
