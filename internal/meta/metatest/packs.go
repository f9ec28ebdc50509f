package metatest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/meta"
)

// gcDelay is an olderThan no test outlives: TombstonePack refuses any pack
// whose Live changed in the test.
const gcDelay = 24 * time.Hour

func beginPack(t *testing.T, s meta.Store, id string) {
	t.Helper()
	if err := s.BeginPack(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

func place(t *testing.T, s meta.Store, id string, size int64, files ...meta.Placement) []bool {
	t.Helper()
	return must(s.PlaceFiles(context.Background(), id, size, files))(t)
}

// at is a placement without a condition.
func at(d digest.Digest, off, length int64) meta.Placement {
	return meta.Placement{Digest: d, Offset: off, Length: length}
}

func loc(id string, off, length int64) meta.Location {
	return meta.Location{Pack: id, Offset: off, Length: length}
}

// allPacks lists every pack, limit per page, and checks the pages' bounds
// and order.
func allPacks(t *testing.T, s meta.Store, limit int) []meta.PackInfo {
	t.Helper()
	var all []meta.PackInfo
	after := ""
	for {
		page := must(s.ListPacks(context.Background(), after, limit))(t)
		if len(page) == 0 {
			return all
		}
		if len(page) > limit {
			t.Fatalf("page of %d > limit %d", len(page), limit)
		}
		for _, p := range page {
			if p.ID <= after {
				t.Fatalf("ListPacks after %q returned %q", after, p.ID)
			}
			after = p.ID
		}
		all = append(all, page...)
	}
}

// packInfo returns pack id's record; ok is false for none.
func packInfo(t *testing.T, s meta.Store, id string) (meta.PackInfo, bool) {
	t.Helper()
	for _, p := range allPacks(t, s, 100) {
		if p.ID == id {
			return p, true
		}
	}
	return meta.PackInfo{}, false
}

func mustPack(t *testing.T, s meta.Store, id string) meta.PackInfo {
	t.Helper()
	p, ok := packInfo(t, s, id)
	if !ok {
		t.Fatalf("pack %s has no record", id)
	}
	return p
}

// checkLive checks the invariant every step keeps: each pack's Live is the
// sum of the Lengths of the files located in it. files must name every file
// that may have a location.
func checkLive(t *testing.T, s meta.Store, files []digest.Digest) {
	t.Helper()
	sum := map[string]int64{}
	for _, fi := range must(s.Files(context.Background(), files))(t) {
		if !fi.Location.IsZero() {
			if !fi.Exists {
				t.Errorf("%s has a location but no entry: %+v", fi.Digest, fi)
			}
			sum[fi.Location.Pack] += fi.Location.Length
		}
	}
	for _, p := range allPacks(t, s, 100) {
		if p.Live != sum[p.ID] {
			t.Errorf("pack %s: Live %d, files located in it sum to %d", p.ID, p.Live, sum[p.ID])
		}
		delete(sum, p.ID)
	}
	for id, n := range sum {
		t.Errorf("files hold %d bytes in pack %s, which has no record", n, id)
	}
}

func samePack(a, b meta.PackInfo) bool {
	return a.ID == b.ID && a.Size == b.Size && a.Live == b.Live && a.Changed.Equal(b.Changed) && a.Tombstoned == b.Tombstoned
}

func locations(t *testing.T, s meta.Store, files ...digest.Digest) []meta.Location {
	t.Helper()
	var out []meta.Location
	for _, fi := range must(s.Files(context.Background(), files))(t) {
		out = append(out, fi.Location)
	}
	return out
}

func testPackBegin(t *testing.T, s meta.Store) {
	if got := allPacks(t, s, 10); len(got) != 0 {
		t.Fatalf("packs of an empty store = %+v", got)
	}
	beginPack(t, s, "p1")
	p := mustPack(t, s, "p1")
	if p.Size != 0 || p.Live != 0 || p.Tombstoned || p.Changed.IsZero() {
		t.Fatalf("begun pack = %+v, want empty, Changed set", p)
	}
	f := Digest("f")
	addLayer(t, s, Digest("l"), f)
	place(t, s, "p1", 100, at(f, 0, 40))
	// A second BeginPack (a retried writer) leaves the record as it is.
	beginPack(t, s, "p1")
	if got := mustPack(t, s, "p1"); got.Size != 100 || got.Live != 40 || !got.Changed.Equal(p.Changed) {
		t.Fatalf("pack after a second BeginPack = %+v, want size 100, live 40, Changed %v", got, p.Changed)
	}
}

// testPackPlace follows files placed into packs and moved between them.
func testPackPlace(t *testing.T, s meta.Store) {
	a, b, c, unknown := Digest("a"), Digest("b"), sha512Digest(3), Digest("unknown")
	all := []digest.Digest{a, b, c, unknown}
	addLayer(t, s, Digest("l"), a, b, c)
	beginPack(t, s, "p1")
	begun := mustPack(t, s, "p1")
	got := place(t, s, "p1", 1000, at(a, 0, 10), at(b, 10, 20), at(unknown, 30, 5), at(c, 35, 100))
	if !slices.Equal(got, []bool{true, true, false, true}) {
		t.Fatalf("placed = %v, want the unknown file alone not placed", got)
	}
	want := []meta.Location{loc("p1", 0, 10), loc("p1", 10, 20), loc("p1", 35, 100), {}}
	if got := locations(t, s, a, b, c, unknown); !slices.Equal(got, want) {
		t.Fatalf("locations = %+v, want %+v", got, want)
	}
	if fi := fileInfo(t, s, unknown); fi.Exists {
		t.Fatalf("placing an unknown file made an entry: %+v", fi)
	}
	p1 := mustPack(t, s, "p1")
	// Placing only adds: Changed stays the time the pack was begun.
	if p1.Size != 1000 || p1.Live != 130 || p1.Tombstoned || !p1.Changed.Equal(begun.Changed) {
		t.Fatalf("p1 = %+v, want size 1000, live 130, Changed %v", p1, begun.Changed)
	}
	checkLive(t, s, all)

	// The same place again changes nothing.
	if got := place(t, s, "p1", 1000, at(a, 0, 10)); !got[0] {
		t.Fatal("placing a file where it is: not placed")
	}
	if got := mustPack(t, s, "p1"); !samePack(got, p1) {
		t.Fatalf("p1 after a repeated place = %+v, want %+v", got, p1)
	}

	// A rewrite moves a into p2: p1's Live falls and its Changed moves on.
	beginPack(t, s, "p2")
	marker := mustPack(t, s, "p2").Changed
	if got := place(t, s, "p2", 50, at(a, 5, 12)); !got[0] {
		t.Fatal("move into p2: not placed")
	}
	if got := locations(t, s, a); got[0] != loc("p2", 5, 12) {
		t.Fatalf("a at %+v after the move", got[0])
	}
	p1 = mustPack(t, s, "p1")
	if p1.Live != 120 || p1.Size != 1000 {
		t.Fatalf("p1 after a left = %+v, want live 120, size 1000", p1)
	}
	if p1.Changed.Before(marker) || !p1.Changed.After(begun.Changed) {
		t.Fatalf("p1 Changed %v after its Live fell, want after its begin %v and not before %v", p1.Changed, begun.Changed, marker)
	}
	p2 := mustPack(t, s, "p2")
	if p2.Live != 12 || p2.Size != 50 || !p2.Changed.Equal(marker) {
		t.Fatalf("p2 = %+v, want live 12, size 50, Changed %v", p2, marker)
	}
	checkLive(t, s, all)

	// A move within one pack: its Live follows the new length.
	if got := place(t, s, "p1", 2000, at(b, 500, 7)); !got[0] {
		t.Fatal("move within p1: not placed")
	}
	if p1 := mustPack(t, s, "p1"); p1.Live != 107 || p1.Size != 2000 {
		t.Fatalf("p1 after a move within = %+v, want live 107, size 2000", p1)
	}
	checkLive(t, s, all)

	// The same file twice in one call: taken in order, the later one wins.
	got = place(t, s, "p2", 50, at(c, 0, 1), at(b, 1, 2), at(c, 3, 4))
	if !slices.Equal(got, []bool{true, true, true}) {
		t.Fatalf("placed = %v", got)
	}
	if got := locations(t, s, a, b, c); !slices.Equal(got, []meta.Location{loc("p2", 5, 12), loc("p2", 1, 2), loc("p2", 3, 4)}) {
		t.Fatalf("locations = %+v", got)
	}
	if p1, p2 := mustPack(t, s, "p1"), mustPack(t, s, "p2"); p1.Live != 0 || p2.Live != 18 {
		t.Fatalf("live p1 %d, p2 %d; want 0, 18", p1.Live, p2.Live)
	}
	checkLive(t, s, all)

	// Changing refs and tombstones leaves locations alone.
	release(t, s, Digest("l"))
	must(s.TombstoneFiles(context.Background(), []digest.Digest{a, b}))(t)
	addLayer(t, s, Digest("l2"), a)
	if got := locations(t, s, a, b, c); !slices.Equal(got, []meta.Location{loc("p2", 5, 12), loc("p2", 1, 2), loc("p2", 3, 4)}) {
		t.Fatalf("locations after release, tombstone and revive = %+v", got)
	}
	checkLive(t, s, all)
	// A tombstoned file still has its entry, so it may be placed.
	if got := place(t, s, "p1", 2000, at(b, 0, 9)); !got[0] {
		t.Fatal("tombstoned file: not placed")
	}
	checkLive(t, s, all)
}

// testPackPlaceFrom: a conditional placement applies only while the file is
// where the caller saw it.
func testPackPlaceFrom(t *testing.T, s meta.Store) {
	a, b, fresh := Digest("a"), Digest("b"), Digest("fresh")
	all := []digest.Digest{a, b, fresh}
	addLayer(t, s, Digest("l"), a, b, fresh)
	for _, id := range []string{"old", "new", "other"} {
		beginPack(t, s, id)
	}
	place(t, s, "old", 100, at(a, 0, 10), at(b, 10, 20))
	from := func(d digest.Digest, off, length int64, l meta.Location) meta.Placement {
		return meta.Placement{Digest: d, Offset: off, Length: length, From: l}
	}
	got := place(t, s, "new", 30,
		from(a, 0, 10, loc("old", 0, 10)),
		from(b, 10, 20, loc("old", 10, 21)),   // stale length
		from(b, 10, 20, loc("old", 11, 20)),   // stale offset
		from(b, 10, 20, loc("other", 10, 20)), // another pack
		from(fresh, 0, 5, loc("old", 30, 5)),  // no location at all
	)
	if !slices.Equal(got, []bool{true, false, false, false, false}) {
		t.Fatalf("placed = %v, want a alone", got)
	}
	if got := locations(t, s, a, b, fresh); !slices.Equal(got, []meta.Location{loc("new", 0, 10), loc("old", 10, 20), {}}) {
		t.Fatalf("locations = %+v", got)
	}
	checkLive(t, s, all)
	// Two compactions raced: the second saw a in old, but it has moved.
	if got := place(t, s, "other", 10, from(a, 0, 10, loc("old", 0, 10))); got[0] {
		t.Fatal("a stale From was placed")
	}
	// Within one call the second placement sees the first's move.
	got = place(t, s, "other", 40, from(b, 0, 20, loc("old", 10, 20)), from(b, 20, 20, loc("old", 10, 20)))
	if !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("placed = %v, want the first alone", got)
	}
	if got := locations(t, s, b); got[0] != loc("other", 0, 20) {
		t.Fatalf("b at %+v", got[0])
	}
	if p := mustPack(t, s, "old"); p.Live != 0 {
		t.Fatalf("old = %+v, want live 0", p)
	}
	if p := mustPack(t, s, "other"); p.Size != 40 || p.Live != 20 {
		t.Fatalf("other = %+v, want size 40 (set even by a call that placed little), live 20", p)
	}
	checkLive(t, s, all)
}

// testPackDrop: a dropped entry's bytes leave its pack; a revived entry
// keeps its location.
func testPackDrop(t *testing.T, s meta.Store) {
	ctx := context.Background()
	a, b, c, d, e := Digest("a"), Digest("b"), Digest("c"), Digest("d"), Digest("e")
	all := []digest.Digest{a, b, c, d, e}
	addLayer(t, s, Digest("l0"), all...)
	beginPack(t, s, "p")
	beginPack(t, s, "q")
	place(t, s, "p", 1000, at(a, 0, 1), at(b, 1, 10), at(c, 11, 100))
	place(t, s, "q", 1000, at(d, 0, 1000))
	release(t, s, Digest("l0"))
	begun := mustPack(t, s, "p").Changed

	// The plain end: tombstone, drop.
	must(s.Tombstone(ctx, a))(t)
	if revived := must(s.DropFileEntry(ctx, a))(t); revived {
		t.Fatal("DropFileEntry: revived")
	}
	p := mustPack(t, s, "p")
	if p.Live != 110 || !p.Changed.After(begun) {
		t.Fatalf("p after a was dropped = %+v, want live 110, Changed after %v", p, begun)
	}
	checkLive(t, s, all)
	// A retry is a no-op.
	if _, err := s.DropFileEntry(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got := mustPack(t, s, "p"); !samePack(got, p) {
		t.Fatalf("p after a second drop = %+v, want %+v", got, p)
	}

	// Revived before the drop: the entry stays, Missing, where it was.
	must(s.Tombstone(ctx, b))(t)
	addLayer(t, s, Digest("l1"), b)
	if revived := must(s.DropFileEntry(ctx, b))(t); !revived {
		t.Fatal("DropFileEntry of a revived file: not revived")
	}
	if fi := fileInfo(t, s, b); !fi.Missing || fi.Location != loc("p", 1, 10) {
		t.Fatalf("revived file = %+v, want Missing at p 1 10", fi)
	}
	if got := mustPack(t, s, "p"); got.Live != 110 {
		t.Fatalf("p after a revived drop = %+v, want live 110", got)
	}
	checkLive(t, s, all)

	// The bulk drop, with a revived file and one another run settled.
	must(s.TombstoneFiles(ctx, []digest.Digest{c, d, e}))(t)
	addLayer(t, s, Digest("l2"), e)
	revived := must(s.DropFileEntries(ctx, []digest.Digest{c, d, e, b}))(t)
	if !slices.Equal(revived, []digest.Digest{e, b}) {
		t.Fatalf("DropFileEntries revived %v, want e, b", revived)
	}
	if p, q := mustPack(t, s, "p"), mustPack(t, s, "q"); p.Live != 10 || q.Live != 0 {
		t.Fatalf("live p %d, q %d after the bulk drop; want 10, 0", p.Live, q.Live)
	}
	if fi := fileInfo(t, s, b); !fi.Missing || fi.Location != loc("p", 1, 10) {
		t.Fatalf("settled file = %+v, want Missing at p 1 10", fi)
	}
	checkLive(t, s, all)

	// Placed anew after the drop, the entry is gone: nothing is placed.
	if got := place(t, s, "q", 1000, at(d, 0, 1000)); got[0] {
		t.Fatal("a dropped file was placed")
	}
	checkLive(t, s, all)
	// Released layers and tombstones do not move bytes out of packs.
	must(s.ReleaseLayers(ctx, []digest.Digest{Digest("l1"), Digest("l2")}))(t)
	must(s.TombstoneFiles(ctx, []digest.Digest{b, e}))(t)
	checkLive(t, s, all)
	if got := locations(t, s, b, e); got[0] != loc("p", 1, 10) || !got[1].IsZero() {
		t.Fatalf("locations after release and tombstone = %+v", got)
	}
}

// testPackDropBulk drops more located files in one call than one step (a
// bolt transaction, a Redis script) takes.
func testPackDropBulk(t *testing.T, s meta.Store) {
	ctx := context.Background()
	const n = 3000
	files := Digests("drop", n)
	addLayer(t, s, Digest("l"), files...)
	beginPack(t, s, "even")
	beginPack(t, s, "odd")
	var even, odd []meta.Placement
	for i, d := range files {
		if i%2 == 0 {
			even = append(even, at(d, int64(i), 3))
		} else {
			odd = append(odd, at(d, int64(i), 5))
		}
	}
	place(t, s, "even", n, even...)
	place(t, s, "odd", n, odd...)
	if e, o := mustPack(t, s, "even"), mustPack(t, s, "odd"); e.Live != 3*n/2 || o.Live != 5*n/2 {
		t.Fatalf("live even %d, odd %d", e.Live, o.Live)
	}
	release(t, s, Digest("l"))
	must(s.TombstoneFiles(ctx, files))(t)
	must(s.DropFileEntries(ctx, files[:n-1]))(t)
	if e, o := mustPack(t, s, "even"), mustPack(t, s, "odd"); e.Live != 0 || o.Live != 5 {
		t.Fatalf("live even %d, odd %d after the drop; want 0, 5", e.Live, o.Live)
	}
	checkLive(t, s, files)
}

// testPackGone: no file ever points into a pack that is unrecorded or being
// deleted.
func testPackGone(t *testing.T, s meta.Store) {
	ctx := context.Background()
	f, g := Digest("f"), Digest("g")
	addLayer(t, s, Digest("l"), f, g)
	if _, err := s.PlaceFiles(ctx, "never", 10, []meta.Placement{at(f, 0, 10)}); !errors.Is(err, meta.ErrPackGone) {
		t.Fatalf("PlaceFiles into an unrecorded pack: err = %v, want ErrPackGone", err)
	}
	if _, ok := packInfo(t, s, "never"); ok {
		t.Fatal("PlaceFiles into an unrecorded pack recorded it")
	}
	beginPack(t, s, "live")
	place(t, s, "live", 10, at(g, 0, 10))
	beginPack(t, s, "doomed")
	if ok := must(s.TombstonePack(ctx, "doomed", 0))(t); !ok {
		t.Fatal("TombstonePack of an empty pack = false")
	}
	// The move out of "live" is refused with the rest: nothing changes.
	_, err := s.PlaceFiles(ctx, "doomed", 99, []meta.Placement{at(f, 0, 10), at(g, 10, 10)})
	if !errors.Is(err, meta.ErrPackGone) {
		t.Fatalf("PlaceFiles into a tombstoned pack: err = %v, want ErrPackGone", err)
	}
	if got := locations(t, s, f, g); !slices.Equal(got, []meta.Location{{}, loc("live", 0, 10)}) {
		t.Fatalf("locations after a refused place = %+v", got)
	}
	if p := mustPack(t, s, "doomed"); p.Size != 0 || p.Live != 0 || !p.Tombstoned {
		t.Fatalf("tombstoned pack after a refused place = %+v", p)
	}
	// BeginPack of a tombstoned pack leaves it tombstoned.
	beginPack(t, s, "doomed")
	if p := mustPack(t, s, "doomed"); !p.Tombstoned {
		t.Fatalf("BeginPack revived a tombstoned pack: %+v", p)
	}
	if p := mustPack(t, s, "live"); p.Live != 10 {
		t.Fatalf("live pack = %+v", p)
	}
	checkLive(t, s, []digest.Digest{f, g})
}

func testPackTombstone(t *testing.T, s meta.Store) {
	ctx := context.Background()
	tomb := func(id string, olderThan time.Duration) bool {
		t.Helper()
		return must(s.TombstonePack(ctx, id, olderThan))(t)
	}
	if tomb("never", 0) {
		t.Fatal("TombstonePack of an unrecorded pack = true")
	}
	if _, ok := packInfo(t, s, "never"); ok {
		t.Fatal("TombstonePack recorded a pack")
	}
	f := Digest("f")
	addLayer(t, s, Digest("l"), f)
	beginPack(t, s, "full")
	place(t, s, "full", 10, at(f, 0, 10))
	if tomb("full", 0) {
		t.Fatal("TombstonePack of a pack with live files = true")
	}
	beginPack(t, s, "young")
	if tomb("young", gcDelay) {
		t.Fatal("TombstonePack of a pack begun just now = true")
	}
	if p := mustPack(t, s, "young"); p.Tombstoned {
		t.Fatalf("young pack tombstoned: %+v", p)
	}
	if !tomb("young", 0) || !tomb("young", 0) {
		t.Fatal("TombstonePack of an empty pack with olderThan 0 = false")
	}
	// Once tombstoned, a stopped GC resumes whatever the delay.
	if !tomb("young", gcDelay) {
		t.Fatal("TombstonePack of a tombstoned pack = false")
	}
	if p := mustPack(t, s, "young"); !p.Tombstoned || p.Live != 0 {
		t.Fatalf("tombstoned pack = %+v", p)
	}
	// A pack emptied just now waits for the delay: its Changed moved on.
	beginPack(t, s, "next")
	place(t, s, "next", 10, at(f, 0, 10))
	if p := mustPack(t, s, "full"); p.Live != 0 {
		t.Fatalf("emptied pack = %+v", p)
	}
	if tomb("full", gcDelay) {
		t.Fatal("TombstonePack of a pack emptied just now = true")
	}
	if !tomb("full", 0) {
		t.Fatal("TombstonePack of an emptied pack with olderThan 0 = false")
	}
	if tomb("next", 0) {
		t.Fatal("TombstonePack of the pack the file moved into = true")
	}
}

func testPackDelete(t *testing.T, s meta.Store) {
	ctx := context.Background()
	del := func(id string) bool {
		t.Helper()
		return must(s.DeletePack(ctx, id))(t)
	}
	if !del("never") {
		t.Fatal("DeletePack of an unrecorded pack = false")
	}
	beginPack(t, s, "p")
	if del("p") {
		t.Fatal("DeletePack of a pack not tombstoned = true")
	}
	if p := mustPack(t, s, "p"); p.Tombstoned {
		t.Fatalf("pack after a refused delete = %+v", p)
	}
	must(s.TombstonePack(ctx, "p", 0))(t)
	if !del("p") {
		t.Fatal("DeletePack of a tombstoned pack = false")
	}
	if _, ok := packInfo(t, s, "p"); ok {
		t.Fatal("deleted pack still listed")
	}
	if !del("p") {
		t.Fatal("second DeletePack = false")
	}
	// Its id is free again; a new pack of that id starts afresh.
	beginPack(t, s, "p")
	if p := mustPack(t, s, "p"); p.Tombstoned || p.Size != 0 {
		t.Fatalf("pack begun again = %+v", p)
	}
}

func testPackList(t *testing.T, s meta.Store) {
	ctx := context.Background()
	var ids []string
	for i := range 25 {
		id := fmt.Sprintf("%02x%06x", (i*37)%256, i)
		ids = append(ids, id)
		beginPack(t, s, id)
	}
	slices.Sort(ids)
	for _, limit := range []int{1, 7, 25, 100} {
		var got []string
		for _, p := range allPacks(t, s, limit) {
			got = append(got, p.ID)
		}
		if !slices.Equal(got, ids) {
			t.Fatalf("ListPacks by %d = %v, want %v", limit, got, ids)
		}
	}
	// A cursor between ids starts at the next one.
	mid := ids[10] + "0"
	if got := must(s.ListPacks(ctx, mid, 2))(t); len(got) != 2 || got[0].ID != ids[11] || got[1].ID != ids[12] {
		t.Fatalf("ListPacks after %q = %+v, want %s, %s", mid, got, ids[11], ids[12])
	}
	if got := must(s.ListPacks(ctx, ids[len(ids)-1], 10))(t); len(got) != 0 {
		t.Fatalf("ListPacks after the last = %+v", got)
	}
	if got := must(s.ListPacks(ctx, "", 0))(t); len(got) != 0 {
		t.Fatalf("ListPacks with limit 0 = %+v", got)
	}
}

// testPackInvalid: malformed arguments fail and change nothing.
func testPackInvalid(t *testing.T, s meta.Store) {
	ctx := context.Background()
	f := Digest("f")
	addLayer(t, s, Digest("l"), f)
	beginPack(t, s, "p")
	for _, id := range []string{"", strings.Repeat("a", meta.MaxPackID+1), "a/b", "a b", "a\x00", "caf\xc3\xa9"} {
		if err := s.BeginPack(ctx, id); !errors.Is(err, meta.ErrInvalidPack) {
			t.Errorf("BeginPack(%q): err = %v, want ErrInvalidPack", id, err)
		}
		if _, err := s.PlaceFiles(ctx, id, 10, []meta.Placement{at(f, 0, 10)}); !errors.Is(err, meta.ErrInvalidPack) {
			t.Errorf("PlaceFiles(%q): err = %v, want ErrInvalidPack", id, err)
		}
		if _, err := s.TombstonePack(ctx, id, 0); !errors.Is(err, meta.ErrInvalidPack) {
			t.Errorf("TombstonePack(%q): err = %v, want ErrInvalidPack", id, err)
		}
		if _, err := s.DeletePack(ctx, id); !errors.Is(err, meta.ErrInvalidPack) {
			t.Errorf("DeletePack(%q): err = %v, want ErrInvalidPack", id, err)
		}
	}
	if err := s.BeginPack(ctx, strings.Repeat("a", meta.MaxPackID)); err != nil {
		t.Errorf("BeginPack of a MaxPackID-byte id: %v", err)
	}
	for _, bad := range []meta.Placement{at(f, -1, 10), at(f, 0, 0), at(f, 0, -5)} {
		_, err := s.PlaceFiles(ctx, "p", 10, []meta.Placement{at(f, 0, 10), bad})
		if !errors.Is(err, meta.ErrInvalidPack) {
			t.Errorf("PlaceFiles of %+v: err = %v, want ErrInvalidPack", bad, err)
		}
	}
	if _, err := s.PlaceFiles(ctx, "p", -1, []meta.Placement{at(f, 0, 10)}); !errors.Is(err, meta.ErrInvalidPack) {
		t.Errorf("PlaceFiles of size -1: err = %v, want ErrInvalidPack", err)
	}
	bad := at("sha256:nothex", 0, 10)
	if _, err := s.PlaceFiles(ctx, "p", 10, []meta.Placement{at(f, 0, 10), bad}); !errors.Is(err, meta.ErrInvalidDigest) {
		t.Errorf("PlaceFiles of a bad digest: err = %v, want ErrInvalidDigest", err)
	}
	if got := locations(t, s, f); !got[0].IsZero() {
		t.Fatalf("a refused PlaceFiles placed f at %+v", got[0])
	}
	if p := mustPack(t, s, "p"); p.Size != 0 || p.Live != 0 {
		t.Fatalf("pack after refused places = %+v", p)
	}
	// An empty placement list still records the size.
	if got := place(t, s, "p", 77); len(got) != 0 {
		t.Fatalf("placed = %v for no files", got)
	}
	if p := mustPack(t, s, "p"); p.Size != 77 {
		t.Fatalf("pack after an empty place = %+v, want size 77", p)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.PlaceFiles(cctx, "p", 10, []meta.Placement{at(f, 0, 10)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("PlaceFiles with a cancelled ctx: err = %v", err)
	}
}
