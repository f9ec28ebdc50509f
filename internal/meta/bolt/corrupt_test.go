package bolt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/meta/metatest"
	"github.com/cairn-registry/cairn/internal/testutil/faults"
	"github.com/opencontainers/go-digest"
)

const corruptLayers = 40

// fillStore writes enough records that the file spans many pages: layers
// with files and recipes, pulls (nested buckets), a pack.
func fillStore(t *testing.T, s *bolt.Store) {
	t.Helper()
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	for i := range corruptLayers {
		l := metatest.Digest(fmt.Sprint("layer", i))
		if _, err := s.AddLayerRefs(ctx, l, metatest.Digests(fmt.Sprint("file", i), 30)); err != nil {
			t.Fatal(err)
		}
		if err := s.PutLayer(ctx, l, bytes.Repeat([]byte{byte(i)}, 300), meta.StateDeduplicated); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecordPull(ctx, fmt.Sprint("client", i%5), l, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.BeginPack(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetStoreID(ctx, "storage-1"); err != nil {
		t.Fatal(err)
	}
}

// filledFile creates a filled, closed store file and returns its path.
func filledFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cairn-meta.db")
	s, err := bolt.OpenWith(path, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	fillStore(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// everyPage is offset 40 of every page after the two meta pages: the second
// element header of each leaf or branch page, so that some page every read
// needs is damaged whatever the layout.
func everyPage(t *testing.T, path string) []int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := int64(2 * 4096); off < fi.Size(); off += 4096 {
		offs = append(offs, off+40)
	}
	return offs
}

// readAll reads every layer, its files and recipe, and the pulls.
func readAll(ctx context.Context, s meta.Store) (layers int, err error) {
	var after digest.Digest
	for {
		ls, err := s.ListLayers(ctx, meta.StateDeduplicated, after, 7)
		if err != nil || len(ls) == 0 {
			return layers, err
		}
		for _, l := range ls {
			if _, err := s.LayerFiles(ctx, l); err != nil {
				return layers, err
			}
			if _, _, err := s.GetLayer(ctx, l); err != nil && !errors.Is(err, meta.ErrNotFound) {
				return layers, err
			}
			if _, err := s.LayerPulls(ctx, l, time.Unix(1_700_000_000, 0)); err != nil {
				return layers, err
			}
		}
		layers += len(ls)
		after = ls[len(ls)-1]
	}
}

// TestBoltCorruptFileNeverPanics: a damaged file fails OpenWith with
// ErrCorrupt, or (when the damage is on a page nothing uses) opens and
// reads cleanly; it never panics. (Before, 12 bytes at either offset made
// bbolt's cursor panic on open or on the first pull.)
func TestBoltCorruptFileNeverPanics(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name        string
		damage      func(t *testing.T, path string)
		mustCorrupt bool
	}{
		{"page 8", func(t *testing.T, p string) { faults.Overwrite(t, p, 8*4096+40) }, false},
		{"page 4", func(t *testing.T, p string) { faults.Overwrite(t, p, 4*4096+40) }, false},
		{"every page", func(t *testing.T, p string) { faults.Overwrite(t, p, everyPage(t, p)...) }, true},
		{"truncated to half", func(t *testing.T, p string) {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"both meta pages", func(t *testing.T, p string) { faults.Overwrite(t, p, 16, 4096+16) }, true},
		{"shorter than a page", func(t *testing.T, p string) {
			if err := os.Truncate(p, 100); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filledFile(t)
			c.damage(t, path)
			s, err := bolt.OpenWith(path, testOpts)
			if err != nil {
				if !errors.Is(err, meta.ErrCorrupt) {
					t.Fatalf("OpenWith = %v, want meta.ErrCorrupt", err)
				}
				t.Logf("OpenWith: %v", err)
				return
			}
			defer s.Close()
			if c.mustCorrupt {
				t.Fatal("OpenWith of the damaged file succeeded")
			}
			n, err := readAll(ctx, s)
			if err != nil || n != corruptLayers {
				t.Fatalf("opened cleanly (damage on an unused page), but read %d of %d layers: %v", n, corruptLayers, err)
			}
			t.Log("the damaged page is not in use: opened and read cleanly")
		})
	}
}

// TestBoltCorruptWhileOpen: damage after the check at open (another
// writer, a failing disk) fails the calls that read it with ErrCorrupt;
// the process goes on.
func TestBoltCorruptWhileOpen(t *testing.T) {
	ctx := context.Background()
	t.Run("overwritten", func(t *testing.T) {
		path := filledFile(t)
		s, err := bolt.OpenWith(path, testOpts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// The file is mapped shared: the damage is what the next read sees.
		faults.Overwrite(t, path, everyPage(t, path)...)
		_, err = readAll(ctx, s)
		if !errors.Is(err, meta.ErrCorrupt) {
			t.Fatalf("reading the damaged store: %v, want meta.ErrCorrupt", err)
		}
		t.Log(err)
	})
	t.Run("truncated", func(t *testing.T) {
		path := filledFile(t)
		s, err := bolt.OpenWith(path, testOpts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// Pages past the end fault (SIGBUS) when read.
		if err := os.Truncate(path, 3*4096); err != nil {
			t.Fatal(err)
		}
		_, err = readAll(ctx, s)
		if !errors.Is(err, meta.ErrCorrupt) {
			t.Fatalf("reading the truncated store: %v, want meta.ErrCorrupt", err)
		}
		t.Log(err)
	})
}

// TestOpenBoltRecovering: a corrupt file is moved aside, kept as it was, and
// a fresh empty store (StoreID "", so the caller rebuilds) opens in its
// place; a sound file is opened as it is.
func TestOpenBoltRecovering(t *testing.T) {
	ctx := context.Background()
	path := filledFile(t)

	s, aside, err := bolt.OpenRecovering(path, testOpts)
	if err != nil || aside != "" {
		t.Fatalf("OpenRecovering of a sound file = %q, %v", aside, err)
	}
	if id, err := s.StoreID(ctx); err != nil || id != "storage-1" {
		t.Fatalf("StoreID of the sound file = %q, %v", id, err)
	}
	if n, err := readAll(ctx, s); err != nil || n != corruptLayers {
		t.Fatalf("read %d of %d layers of the sound file: %v", n, corruptLayers, err)
	}
	s.Close()

	faults.Overwrite(t, path, everyPage(t, path)...)
	damaged, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, aside, err = bolt.OpenRecovering(path, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(aside, path+".corrupt-") {
		t.Fatalf("moved aside to %q, want %s.corrupt-<time>", aside, path)
	}
	if kept, err := os.ReadFile(aside); err != nil || !bytes.Equal(kept, damaged) {
		t.Fatalf("the moved-aside file is not the damaged one as it was (err %v)", err)
	}
	if id, err := s.StoreID(ctx); err != nil || id != "" {
		t.Fatalf("StoreID of the fresh store = %q, %v; want \"\"", id, err)
	}
	if n, err := readAll(ctx, s); err != nil || n != 0 {
		t.Fatalf("the fresh store lists %d layers (%v), want 0", n, err)
	}
	fillStore(t, s)
	if n, err := readAll(ctx, s); err != nil || n != corruptLayers {
		t.Fatalf("the fresh store read %d of %d layers after filling: %v", n, corruptLayers, err)
	}
}

// TestOpenBoltRecoveringKeepsEarlierCopies: a second corrupt file in the
// same second does not overwrite the first one moved aside.
func TestOpenBoltRecoveringKeepsEarlierCopies(t *testing.T) {
	path := filledFile(t)
	var asides []string
	for range 2 {
		faults.Overwrite(t, path, 16, 4096+16)
		s, aside, err := bolt.OpenRecovering(path, testOpts)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		asides = append(asides, aside)
	}
	if asides[0] == asides[1] {
		t.Fatalf("both corrupt files moved to %s", asides[0])
	}
	for _, a := range asides {
		if _, err := os.Stat(a); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenBoltRecoveringLocked: a file held by another process is not
// corrupt: ErrLocked, nothing moved.
func TestOpenBoltRecoveringLocked(t *testing.T) {
	path := filledFile(t)
	held, err := bolt.OpenWith(path, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	opts := testOpts
	opts.LockTimeout = 50 * time.Millisecond
	s, aside, err := bolt.OpenRecovering(path, opts)
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, meta.ErrLocked) || aside != "" {
		t.Fatalf("OpenRecovering of a held file = %q, %v; want meta.ErrLocked, nothing moved", aside, err)
	}
}
