package metatest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/opencontainers/go-digest"
)

// testReleaseLayers: a bulk release is each layer's release and recipe delete, and
// a retry changes nothing.
func testReleaseLayers(t *testing.T, s meta.Store) {
	ctx := context.Background()
	a, b, c, d := Digest("a"), Digest("b"), Digest("c"), sha512Digest(4)
	l1, l2, plain, live := Digest("l1"), Digest("l2"), Digest("plain"), Digest("live")
	addLayer(t, s, l1, a, b)
	addLayer(t, s, l2, b, c, d)
	addLayer(t, s, live, d)
	for _, l := range []digest.Digest{l1, l2, live} {
		if err := s.PutLayer(ctx, l, []byte("recipe"), meta.StateDeduplicated); err != nil {
			t.Fatal(err)
		}
	}
	// A layer no encoder reproduced has a state but holds no files.
	if err := s.PutLayer(ctx, plain, nil, meta.StateIrreproducible); err != nil {
		t.Fatal(err)
	}
	zeroed := must(s.ReleaseLayers(ctx, []digest.Digest{l1, l2, plain, Digest("never"), l1}))(t)
	if !sameSet(zeroed, []digest.Digest{a, b, c}) {
		t.Fatalf("ReleaseLayers zeroed %v, want a, b, c", zeroed)
	}
	if r := refCounts(t, s, a, b, c, d); !slices.Equal(r, []int64{0, 0, 0, 1}) {
		t.Fatalf("refs after ReleaseLayers = %v, want [0 0 0 1]", r)
	}
	for _, l := range []digest.Digest{l1, l2, plain} {
		if _, _, err := s.GetLayer(ctx, l); !errors.Is(err, meta.ErrNotFound) {
			t.Fatalf("recipe of a released layer: err = %v, want ErrNotFound", err)
		}
		if _, err := s.LayerFiles(ctx, l); !errors.Is(err, meta.ErrNotFound) {
			t.Fatalf("LayerFiles of a released layer: err = %v, want ErrNotFound", err)
		}
	}
	if _, _, err := s.GetLayer(ctx, live); err != nil {
		t.Fatalf("recipe of the live layer: %v", err)
	}
	counts := must(s.LayerCounts(ctx))(t)
	if counts[meta.StateDeduplicated] != 1 || counts[meta.StateIrreproducible] != 0 {
		t.Fatalf("LayerCounts after ReleaseLayers = %v, want 1 deduplicated", counts)
	}
	if got := must(s.ZeroFiles(ctx, "", 10))(t); !sameSet(got, []digest.Digest{a, b, c}) {
		t.Fatalf("ZeroFiles = %v, want a, b, c", got)
	}
	if zeroed := must(s.ReleaseLayers(ctx, []digest.Digest{l1, l2, plain}))(t); len(zeroed) != 0 {
		t.Fatalf("retried ReleaseLayers zeroed %v", zeroed)
	}
	if r := refCounts(t, s, a, b, c, d); !slices.Equal(r, []int64{0, 0, 0, 1}) {
		t.Fatalf("refs after retry = %v, want [0 0 0 1]", r)
	}
	if zeroed := must(s.ReleaseLayers(ctx, nil))(t); len(zeroed) != 0 {
		t.Fatalf("ReleaseLayers of no layers zeroed %v", zeroed)
	}
}

// testBulkFiles follows files through TombstoneFiles and DropFileEntries, including a
// file whose tombstone another GC run settled before this one's DropFileEntries.
func testBulkFiles(t *testing.T, s meta.Store) {
	ctx := context.Background()
	a, b, c, d, unknown := Digest("a"), Digest("b"), Digest("c"), sha512Digest(5), Digest("unknown")
	addLayer(t, s, Digest("l0"), a, b, c, d)
	release(t, s, Digest("l0"))
	addLayer(t, s, Digest("l1"), b)
	if ok := must(s.Tombstone(ctx, c))(t); !ok {
		t.Fatal("Tombstone = false")
	}
	got := must(s.TombstoneFiles(ctx, []digest.Digest{a, b, unknown, c, d, a}))(t)
	if want := []digest.Digest{a, c, d, a}; !slices.Equal(got, want) {
		t.Fatalf("TombstoneFiles = %v, want %v", got, want)
	}
	for _, fi := range must(s.Files(ctx, []digest.Digest{a, b, c, d}))(t) {
		if want := fi.Digest != b; fi.Tombstoned != want {
			t.Fatalf("%s after TombstoneFiles: %+v, want tombstoned %v", fi.Digest, fi, want)
		}
	}
	// d is revived after its tombstone: its delete may remove the reviver's copy.
	if r := addLayer(t, s, Digest("l2"), d); !r[0].Write || !r[0].Revived {
		t.Fatalf("revive = %+v", r[0])
	}
	got = must(s.DropFileEntries(ctx, []digest.Digest{a, d, unknown}))(t)
	if !slices.Equal(got, []digest.Digest{d}) {
		t.Fatalf("DropFileEntries revived %v, want [d]", got)
	}
	if fi := fileInfo(t, s, a); fi.Exists {
		t.Fatalf("entry after DropFileEntries = %+v", fi)
	}
	if fi := fileInfo(t, s, d); !fi.Exists || !fi.Missing || fi.Tombstoned || fi.Refs != 1 {
		t.Fatalf("revived file after DropFileEntries = %+v, want 1 ref, missing", fi)
	}
	// Another run's DropFileEntries settled d already: the retry reports it again,
	// which DropFileEntry refuses.
	if got := must(s.DropFileEntries(ctx, []digest.Digest{d}))(t); !slices.Equal(got, []digest.Digest{d}) {
		t.Fatalf("second DropFileEntries of a revived file = %v, want [d]", got)
	}
	if _, err := s.DropFileEntry(ctx, d); !errors.Is(err, meta.ErrNotTombstoned) {
		t.Fatalf("DropFileEntry of a settled revive: err = %v, want ErrNotTombstoned", err)
	}
	// Two runs tombstoned c; one deleted it; a dedup stored it anew; then the
	// other run's delete of the object landed.
	if got := must(s.DropFileEntries(ctx, []digest.Digest{c}))(t); len(got) != 0 {
		t.Fatalf("DropFileEntries of a tombstoned file revived %v", got)
	}
	if r := addLayer(t, s, Digest("l3"), c); r[0] != (meta.FileRef{Digest: c, Refs: 1, Write: true}) {
		t.Fatalf("add after delete = %+v", r[0])
	}
	if got := must(s.DropFileEntries(ctx, []digest.Digest{c}))(t); !slices.Equal(got, []digest.Digest{c}) {
		t.Fatalf("late DropFileEntries of a new entry = %v, want [c]", got)
	}
	if fi := fileInfo(t, s, c); !fi.Missing || fi.Refs != 1 {
		t.Fatalf("new entry after a late DropFileEntries = %+v, want missing", fi)
	}
	if r := addLayer(t, s, Digest("l4"), c); r[0] != (meta.FileRef{Digest: c, Refs: 2, Write: true}) {
		t.Fatalf("next holder of the missing file = %+v, want write", r[0])
	}
	if got := must(s.TombstoneFiles(ctx, nil))(t); len(got) != 0 {
		t.Fatalf("TombstoneFiles of nothing = %v", got)
	}
	if got := must(s.DropFileEntries(ctx, nil))(t); len(got) != 0 {
		t.Fatalf("DropFileEntries of nothing = %v", got)
	}
}

// testBulkInvalid: a bulk call naming a malformed digest fails and changes nothing.
func testBulkInvalid(t *testing.T, s meta.Store) {
	ctx := context.Background()
	bad := digest.Digest("sha256:nothex")
	l, f, z := Digest("layer"), Digest("f"), Digest("z")
	addLayer(t, s, l, f)
	addLayer(t, s, Digest("lz"), z)
	release(t, s, Digest("lz"))
	if err := s.PutLayer(ctx, l, nil, meta.StateDeduplicated); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReleaseLayers(ctx, []digest.Digest{l, bad}); !errors.Is(err, meta.ErrInvalidDigest) {
		t.Fatalf("ReleaseLayers bad digest: err = %v", err)
	}
	if _, err := s.TombstoneFiles(ctx, []digest.Digest{z, bad}); !errors.Is(err, meta.ErrInvalidDigest) {
		t.Fatalf("TombstoneFiles bad digest: err = %v", err)
	}
	if _, err := s.DropFileEntries(ctx, []digest.Digest{bad}); !errors.Is(err, meta.ErrInvalidDigest) {
		t.Fatalf("DropFileEntries bad digest: err = %v", err)
	}
	if _, _, err := s.GetLayer(ctx, l); err != nil {
		t.Fatalf("recipe after a refused release: %v", err)
	}
	if fi := fileInfo(t, s, f); fi.Refs != 1 {
		t.Fatalf("file after a refused release = %+v", fi)
	}
	if fi := fileInfo(t, s, z); fi.Tombstoned {
		t.Fatalf("file after a refused tombstone = %+v", fi)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.ReleaseLayers(cctx, []digest.Digest{l}); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReleaseLayers with cancelled ctx: err = %v", err)
	}
	if fi := fileInfo(t, s, f); fi.Refs != 1 {
		t.Fatalf("file after a cancelled release = %+v", fi)
	}
}

// testBulkLarge releases layers holding more files together than one bolt
// transaction takes.
func testBulkLarge(t *testing.T, s meta.Store) {
	ctx := context.Background()
	const n = 50_000
	files := Digests("bulk", n)
	layers := []digest.Digest{Digest("bulk-a"), Digest("bulk-b"), Digest("bulk-c")}
	addLayer(t, s, layers[0], files...)
	addLayer(t, s, layers[1], files[:n/2]...)
	addLayer(t, s, layers[2], files[n/2:]...)
	zeroed := must(s.ReleaseLayers(ctx, layers))(t)
	if !sameSet(zeroed, files) {
		t.Fatalf("ReleaseLayers zeroed %d files, want %d", len(zeroed), n)
	}
	twice := append(slices.Clone(files), files...)
	tomb := must(s.TombstoneFiles(ctx, twice))(t)
	if !slices.Equal(tomb, twice) {
		t.Fatalf("TombstoneFiles tombstoned %d of %d files", len(tomb), len(twice))
	}
	if revived := must(s.DropFileEntries(ctx, twice))(t); len(revived) != 0 {
		t.Fatalf("DropFileEntries revived %d files", len(revived))
	}
	if z := must(s.ZeroFiles(ctx, "", 10))(t); len(z) != 0 {
		t.Fatalf("ZeroFiles after the deletes = %v", z)
	}
}
