package dedup

import (
	"archive/tar"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/faults"
)

// detectedCorrupt reports whether a copy of the bolt file at path fails to
// open with meta.ErrCorrupt.
func detectedCorrupt(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := bolt.Open(cp)
	if err == nil {
		s.Close()
		return false
	}
	if !errors.Is(err, meta.ErrCorrupt) {
		t.Fatalf("open a copy of the damaged file: %v", err)
	}
	return true
}

// TestCorruptMetadataFileRecovered: a bolt metadata file damaged while
// serve was stopped (12 bytes at 8*4096+40, which made bbolt's cursor
// panic with "slice bounds out of range" and took every request down) is
// moved aside at start, logged once, and serve runs on a fresh file.
func TestCorruptMetadataFileRecovered(t *testing.T) {
	// Enough files that the file index spans page 8.
	bodies := make([][]byte, 600)
	for i := range bodies {
		bodies[i] = content(uint64(9000+i), 2048)
	}
	layers := []testLayer{
		{name: "a", mediaType: mtGzip, blob: gzipStd(t, featureTar(t, 90, tar.FormatPAX), 6)},
		{name: "many-files", mediaType: mtGzip, blob: gzipStd(t, tarOf(t, bodies), 6)},
	}
	root, cfg := dedupedRoot(t, "corrupt/meta", layers)

	path := filepath.Join(root, "cairn-meta.db")
	faults.Overwrite(t, path, 8*4096+40)
	if !detectedCorrupt(t, path) {
		// Page 8 is free, or holds a value's bytes (bbolt checks structure,
		// not values), in this run's layout: damage every page's second
		// element too, so that the test still sees a corrupt file.
		t.Log("page 8 holds no structure here; damaging every page")
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		var offs []int64
		for off := int64(2 * 4096); off < fi.Size(); off += 4096 {
			offs = append(offs, off+40)
		}
		faults.Overwrite(t, path, offs...)
		if !detectedCorrupt(t, path) {
			t.Fatal("the damaged file is not detected as corrupt")
		}
	}

	// Start waits for /v2/ to answer; a panic at start would fail it.
	srv := cairnproc.Start(t, root, "--config", cfg)
	for range 3 {
		resp, err := http.Get(srv.URL + "/v2/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v2/ = %d", resp.StatusCode)
		}
	}
	if exited, st := srv.Exited(); exited {
		t.Fatalf("serve exited: %v\n%s", st, srv.Logs())
	}

	asides, err := filepath.Glob(path + ".corrupt-*")
	if err != nil || len(asides) != 1 {
		t.Fatalf("moved-aside files = %v, %v; want one %s.corrupt-<time>", asides, err, path)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no fresh metadata file: %v", err)
	}
	logs, _ := srv.LogsWith("metadata file is corrupt")
	var lines []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "metadata file is corrupt") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("want one log line about the corrupt file, got %d:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, want := range []string{path, asides[0], "rebuilt from storage"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("the log line does not say %q: %s", want, lines[0])
		}
	}
	t.Logf("log: %s", lines[0])

	// The index is rebuilt from storage in the background; pulls may be
	// refused (503) until then, never served wrong.
	pullAfterRebuild(t, srv, "corrupt/meta", layers)
	// And a GC run after it keeps every pack.
	srv.Stop()
	before := storedFileBytes(t, root)
	if rep := runGC(t, "--config", cfg, "--root", root, "--delay", "0s"); rep.Packs.Orphans+rep.Packs.Deleted != 0 {
		t.Fatalf("gc after the rebuild deleted packs: %+v", rep.Packs)
	}
	if after := storedFileBytes(t, root); after != before {
		t.Fatalf("file store %d bytes before gc, %d after", before, after)
	}
	srv = cairnproc.Start(t, root, "--config", cfg)
	pullAll(t, srv, "corrupt/meta", layers)
}
