package testsuite

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// testStageWriter checks, for a driver that stages writes, that nothing of
// a staged file shows at its path until Commit, which replaces the file
// whole; that Cancel and Close drop what was staged and leave the file at
// the path as it was (never delete it: another writer's file may be
// there); and that nothing is left of a dropped file on a new path.
func testStageWriter(t *testing.T, d driver.Driver, base string) {
	st := capability[driver.Stager](t, d, "stage writes")
	ctx := context.Background()
	p := base + "/blobs/data"
	old := randomBytes(1, 3000)
	put(t, d, p, old)

	stage := func(path string, b []byte) driver.FileWriter {
		t.Helper()
		w, err := st.StageWriter(ctx, path)
		if err != nil {
			t.Fatalf("StageWriter(%s): %v", path, err)
		}
		for len(b) > 0 {
			k := min(len(b), 1<<20)
			writeAll(t, w, b[:k])
			b = b[k:]
		}
		return w
	}
	// Larger than any driver's part or block, so some are sent before
	// Commit.
	next := randomBytes(2, 23<<20+5)
	w := stage(p, next)
	if got := get(t, d, p); !bytes.Equal(got, old) {
		t.Fatalf("before Commit %s holds %d bytes, want the old %d", p, len(got), len(old))
	}
	if w.Size() != int64(len(next)) {
		t.Errorf("Size() = %d, want %d", w.Size(), len(next))
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("Close after Commit: %v", err)
	}
	if got := get(t, d, p); !bytes.Equal(got, next) {
		t.Fatalf("after Commit %s holds %d bytes, want the %d staged", p, len(got), len(next))
	}

	w = stage(p, randomBytes(3, 12<<20))
	if err := w.Cancel(ctx); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Error("Write after Cancel succeeded")
	}
	w = stage(p, randomBytes(4, 100))
	if err := w.Close(); err != nil {
		t.Fatalf("Close without Commit: %v", err)
	}
	if err := w.Commit(ctx); err == nil {
		t.Error("Commit after Close succeeded")
	}
	if got := get(t, d, p); !bytes.Equal(got, next) {
		t.Fatalf("after a Cancel and a Close %s holds %d bytes, want the %d committed", p, len(got), len(next))
	}

	q := base + "/blobs/new"
	w = stage(q, randomBytes(5, 6<<20))
	if err := w.Cancel(ctx); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if _, err := d.Stat(ctx, q); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Stat(%s) after a cancelled staged write = %v, want not found", q, err)
	}
	w = stage(q, nil)
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit of an empty staged file: %v", err)
	}
	if got := get(t, d, q); len(got) != 0 {
		t.Errorf("%s holds %d bytes, want an empty file", q, len(got))
	}
	refusesBadPaths(t, base, "StageWriter", func(bad string) error {
		_, err := st.StageWriter(ctx, bad)
		return err
	})
}
