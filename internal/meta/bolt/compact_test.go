package bolt

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/meta"
)

func compactLayer(l int) digest.Digest { return digest.FromString(fmt.Sprint("layer ", l)) }

func compactFiles(l, n int) []digest.Digest {
	files := make([]digest.Digest, n)
	for i := range files {
		h := sha256.Sum256(fmt.Appendf(nil, "%d-%d", l, i))
		files[i] = digest.NewDigestFromBytes(digest.SHA256, h[:])
	}
	return files
}

// bloat fills s with layers of 500 packed files, then releases nine
// layers in ten, as GC would, and returns the files left.
func bloat(t *testing.T, s *Store, layers int) (kept []digest.Digest) {
	t.Helper()
	ctx := context.Background()
	// No fsync per commit while the test fills it: seconds less.
	s.db.NoSync = true
	defer func() { s.db.NoSync = false }()
	const perLayer = 500
	for l := range layers {
		files := compactFiles(l, perLayer)
		if _, err := s.AddLayerRefs(ctx, compactLayer(l), files); err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("%032x", l)
		if err := s.BeginPack(ctx, id); err != nil {
			t.Fatal(err)
		}
		var pl []meta.Placement
		for i, f := range files {
			pl = append(pl, meta.Placement{Digest: f, Offset: int64(8 + i*1000), Length: 1000})
		}
		if _, err := s.PlaceFiles(ctx, id, int64(8+perLayer*1000), pl); err != nil {
			t.Fatal(err)
		}
		if l%10 == 0 {
			kept = append(kept, files...)
		}
	}
	for l := range layers {
		if l%10 == 0 {
			continue
		}
		zero, err := s.ReleaseLayers(ctx, []digest.Digest{compactLayer(l)})
		if err != nil {
			t.Fatal(err)
		}
		tomb, err := s.TombstoneFiles(ctx, zero)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DropFileEntries(ctx, tomb); err != nil {
			t.Fatal(err)
		}
	}
	return kept
}

// checkKept fails unless every file in kept has one reference and a place.
func checkKept(t *testing.T, s *Store, kept []digest.Digest) {
	t.Helper()
	infos, err := s.Files(context.Background(), kept)
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range infos {
		if !fi.Exists || fi.Refs != 1 || fi.Location.IsZero() {
			t.Fatalf("after compaction %+v", fi)
		}
	}
}

// mustOpen opens the store at path or fails the test.
func mustOpen(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// compactLeftAlone runs Compact and fails the test unless it left the file
// at path as it was: the same file, the same size, reported as such. It
// returns Compact's error, which the caller judges.
func compactLeftAlone(t *testing.T, s *Store, path string) error {
	t.Helper()
	was, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	before, after, cerr := s.Compact(context.Background())
	if before != was.Size() || after != before {
		t.Fatalf("Compact: %d -> %d, %v; the file had %d bytes", before, after, cerr, was.Size())
	}
	now, err := os.Stat(path)
	if err != nil || !os.SameFile(was, now) || now.Size() != was.Size() {
		t.Fatalf("the file changed: %v", err)
	}
	return cerr
}

// TestBoltCompactedAtOpen: a store that released most of what it held is
// copied into a compact file at the next open; everything left reads the
// same, and what is left costs under 200 bytes of file per unique file.
func TestBoltCompactedAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	s := mustOpen(t, path)
	kept := bloat(t, s, 120)
	before, _ := s.FileSize()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path)
	defer s.Close()
	after, _ := s.FileSize()
	size := fileSize(t, path)
	t.Logf("file %d bytes before, %d after (%d on disk): %d bytes per unique file left", before, after, size, size/int64(len(kept)))
	if size*2 > before || size > int64(200*len(kept)) {
		t.Fatalf("file %d bytes for %d files (was %d): not compacted", size, len(kept), before)
	}
	checkKept(t, s, kept)
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("the copy was left: %v", err)
	}
}

// TestBoltCompactOnline: the running store is compacted while other
// goroutines read and write through it; no call fails, every write
// acknowledged before or after the swap is there afterwards (and after a
// reopen, so in the file at path), and the file shrank.
func TestBoltCompactOnline(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "meta.db")
	s := mustOpen(t, path)
	defer func() { s.Close() }()
	kept := bloat(t, s, 40)
	bloated := fileSize(t, path)

	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		mu      sync.Mutex
		written []int // layers whose AddLayerRefs returned nil
		failed  atomic.Value
		writes  atomic.Int64
	)
	fail := func(err error) { failed.CompareAndSwap(nil, err) }
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				l := 1000 + w*100000 + i
				if _, err := s.AddLayerRefs(ctx, compactLayer(l), compactFiles(l, 20)); err != nil {
					fail(fmt.Errorf("writer: %w", err))
					return
				}
				if _, err := s.RecordPull(ctx, fmt.Sprint("client ", w), compactLayer(l), time.Now()); err != nil {
					fail(fmt.Errorf("pull: %w", err))
					return
				}
				mu.Lock()
				written = append(written, l)
				mu.Unlock()
				writes.Add(1)
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				infos, err := s.Files(ctx, kept[:500])
				if err != nil {
					fail(fmt.Errorf("reader: %w", err))
					return
				}
				for _, fi := range infos {
					if !fi.Exists || fi.Refs != 1 {
						fail(fmt.Errorf("reader: %+v", fi))
						return
					}
				}
			}
		})
	}
	waitWrites := func(n int64) {
		for deadline := time.Now().Add(10 * time.Second); writes.Load() < n && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	waitWrites(20)
	start := time.Now()
	before, after, err := s.Compact(ctx)
	took := time.Since(start)
	atSwap := writes.Load()
	waitWrites(atSwap + 20)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	onDisk := fileSize(t, path)
	t.Logf("compacted in %v: %d bytes before (%d when bloated), %d after (%d on disk now, %d bytes per unique file); %d writes before the swap, %d in all",
		took, before, bloated, after, onDisk, onDisk/int64(len(kept)+20*len(written)), atSwap, len(written))
	if before < bloated || after*2 > before || onDisk*2 > before {
		t.Fatalf("file %d bytes before, %d after, %d on disk: not compacted", before, after, onDisk)
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("the copy was left: %v", err)
	}
	check := func() {
		t.Helper()
		checkKept(t, s, kept)
		for _, l := range written {
			files, err := s.LayerFiles(ctx, compactLayer(l))
			if err != nil || len(files) != 20 {
				t.Fatalf("layer %d: %d files, %v", l, len(files), err)
			}
			if n, err := s.LayerPulls(ctx, compactLayer(l), time.Time{}); err != nil || n != 1 {
				t.Fatalf("layer %d: %d pulls, %v", l, n, err)
			}
		}
	}
	check()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path)
	check()
}

// TestBoltCompactNotWorth: a small store, and one just compacted, are
// left alone: same file, no copy.
func TestBoltCompactNotWorth(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "meta.db")
	s := mustOpen(t, path)
	defer s.Close()
	unchanged := func() {
		t.Helper()
		if err := compactLeftAlone(t, s, path); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
			t.Fatalf("a copy was made: %v", err)
		}
	}
	if _, err := s.AddLayerRefs(ctx, compactLayer(-1), compactFiles(-1, 1000)); err != nil {
		t.Fatal(err)
	}
	unchanged() // under compactMinSize

	kept := bloat(t, s, 40)
	if before, after, err := s.Compact(ctx); err != nil || after >= before {
		t.Fatalf("the bloated store: %d -> %d, %v", before, after, err)
	}
	unchanged() // compact already
	checkKept(t, s, kept)
}

// TestBoltCompactFails: a copy that cannot be made (its path is taken by
// a directory) leaves the store working on its file as it was.
func TestBoltCompactFails(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "meta.db")
	s := mustOpen(t, path)
	defer s.Close()
	kept := bloat(t, s, 40)
	if err := os.MkdirAll(filepath.Join(path+".compact", "in the way"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := compactLeftAlone(t, s, path)
	if err == nil {
		t.Fatal("no error")
	}
	t.Logf("Compact: %v", err)
	checkKept(t, s, kept)
	if _, err := s.AddLayerRefs(ctx, compactLayer(7777), compactFiles(7777, 10)); err != nil {
		t.Fatal(err)
	}
	if files, err := s.LayerFiles(ctx, compactLayer(7777)); err != nil || len(files) != 10 {
		t.Fatalf("after the failed copy: %d files, %v", len(files), err)
	}
	// Once the way is clear, it works.
	if err := os.RemoveAll(path + ".compact"); err != nil {
		t.Fatal(err)
	}
	if before, after, err := s.Compact(ctx); err != nil || after*2 > before {
		t.Fatalf("Compact: %d -> %d, %v", before, after, err)
	}
	checkKept(t, s, kept)
}
