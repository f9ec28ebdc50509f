package gc

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// packFixture is an empty registry whose dedup files live in packs.
type packFixture struct {
	t     *testing.T
	d     driver.Driver
	meta  *bolt.Store
	store *pack.Store
}

func newPackFixture(t *testing.T) *packFixture {
	m, err := bolt.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	d := inmemory.New()
	s, err := pack.NewStore(d, m, pack.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &packFixture{t: t, d: d, meta: m, store: s}
}

// layer stores n files for layer name in one pack and returns them.
func (f *packFixture) layer(name string, n int) []digest.Digest {
	f.t.Helper()
	ctx := context.Background()
	var ds []digest.Digest
	var bodies [][]byte
	for i := range n {
		b := bytes.Repeat([]byte(fmt.Sprintf("%s file %d ", name, i)), 50+i)
		bodies = append(bodies, b)
		ds = append(ds, digest.FromBytes(b))
	}
	if _, err := f.meta.AddLayerRefs(ctx, digest.FromString(name), ds); err != nil {
		f.t.Fatal(err)
	}
	w := f.store.NewWriter(0)
	for i, b := range bodies {
		if err := w.Put(ctx, ds[i], int64(len(b)), bytes.NewReader(b)); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		f.t.Fatal(err)
	}
	return ds
}

// kill releases layer name and drops the given files, as a GC round does.
func (f *packFixture) kill(name string, files []digest.Digest) {
	f.t.Helper()
	ctx := context.Background()
	if _, err := f.meta.ReleaseLayers(ctx, []digest.Digest{digest.FromString(name)}); err != nil {
		f.t.Fatal(err)
	}
	tomb, err := f.meta.TombstoneFiles(ctx, files)
	if err != nil || len(tomb) != len(files) {
		f.t.Fatalf("tombstoned %d of %d: %v", len(tomb), len(files), err)
	}
	if _, err := f.meta.DropFileEntries(ctx, tomb); err != nil {
		f.t.Fatal(err)
	}
}

func (f *packFixture) gc(opts Options) *Report {
	f.t.Helper()
	opts.Dedup, opts.Packs, opts.Compactor = f.meta, f.meta, f.store
	rep, err := Run(context.Background(), f.d, opts)
	if err != nil {
		f.t.Fatal(err)
	}
	return rep
}

func (f *packFixture) packs() []meta.PackInfo {
	f.t.Helper()
	ps, err := f.meta.ListPacks(context.Background(), "", 1000)
	if err != nil {
		f.t.Fatal(err)
	}
	return ps
}

func (f *packFixture) objects() int {
	f.t.Helper()
	n := 0
	f.d.Walk(context.Background(), layout.PacksDir, func(fi driver.FileInfo) error {
		if !fi.IsDir {
			n++
		}
		return nil
	})
	return n
}

// TestPacksEmptyDeleted: a pack whose files all died is deleted with its
// record once it has been empty for the delay, and not before.
func TestPacksEmptyDeleted(t *testing.T) {
	f := newPackFixture(t)
	dead := f.layer("dead", 20)
	f.layer("live", 20)
	f.kill("dead", dead)

	rep := f.gc(Options{Delay: time.Hour})
	if rep.Packs.Deleted != 0 || len(f.packs()) != 2 || f.objects() != 2 {
		t.Fatalf("within the delay: %+v, %d records, %d objects", *rep.Packs, len(f.packs()), f.objects())
	}
	rep = f.gc(Options{})
	if rep.Packs.Deleted != 1 || rep.Packs.BytesFreed == 0 {
		t.Fatalf("report %+v, want 1 pack deleted", *rep.Packs)
	}
	if len(f.packs()) != 1 || f.objects() != 1 {
		t.Fatalf("%d records, %d objects left, want 1 each", len(f.packs()), f.objects())
	}
}

// TestPacksEmptiedDuringRunKept: a pack whose last file leaves while a
// run goes on (here, as the run lists the packs) is not that run's to
// delete, however long the run takes after it; the next run deletes it.
// A sweep that fixed its cutoff as a duration at its start let the cutoff
// creep into the run as time passed.
func TestPacksEmptiedDuringRunKept(t *testing.T) {
	f := newPackFixture(t)
	dead := f.layer("dead", 20)
	f.layer("live", 20)
	late := &lateIndex{Store: f.meta, during: func() {
		f.kill("dead", dead)
		time.Sleep(100 * time.Millisecond) // the run goes on; the cutoff must not
	}}
	rep, err := Run(context.Background(), f.d, Options{Dedup: f.meta, Packs: late, Compactor: f.store})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Packs.Deleted != 0 || len(f.packs()) != 2 {
		t.Fatalf("the run it was emptied in: %+v, %d records; want none deleted", *rep.Packs, len(f.packs()))
	}
	if rep := f.gc(Options{}); rep.Packs.Deleted != 1 {
		t.Fatalf("the next run: %+v, want 1 pack deleted", *rep.Packs)
	}
}

// lateIndex runs during once, when a run first lists the packs.
type lateIndex struct {
	*bolt.Store
	during func()
	once   sync.Once
}

func (x *lateIndex) ListPacks(ctx context.Context, after string, limit int) ([]meta.PackInfo, error) {
	x.once.Do(x.during)
	return x.Store.ListPacks(ctx, after, limit)
}

// TestPacksOrphans: an object without a record (a writer that stopped
// before recording it) goes after the delay; a record whose object was
// never written (a writer that stopped before writing) goes too.
func TestPacksOrphans(t *testing.T) {
	f := newPackFixture(t)
	ctx := context.Background()
	f.layer("live", 5)
	orphan, _ := pack.NewID()
	if err := f.d.PutContent(ctx, layout.Pack(orphan), []byte("half a pack")); err != nil {
		t.Fatal(err)
	}
	begun, _ := pack.NewID()
	if err := f.meta.BeginPack(ctx, begun); err != nil {
		t.Fatal(err)
	}
	rep := f.gc(Options{Delay: time.Hour})
	if rep.Packs.Orphans != 0 || rep.Packs.Deleted != 0 || f.objects() != 2 || len(f.packs()) != 2 {
		t.Fatalf("within the delay: %+v", *rep.Packs)
	}
	rep = f.gc(Options{})
	if rep.Packs.Orphans != 1 || rep.Packs.Deleted != 1 {
		t.Fatalf("report %+v, want 1 orphan and 1 empty record", *rep.Packs)
	}
	if f.objects() != 1 || len(f.packs()) != 1 {
		t.Fatalf("%d objects, %d records left", f.objects(), len(f.packs()))
	}
	// The writer of the begun pack now fails to place files in it.
	if _, err := f.meta.PlaceFiles(ctx, begun, 100, nil); err == nil {
		t.Fatal("placing into a deleted pack succeeded")
	}
}

// TestPacksCompacted: sparse packs have their live files moved into a new
// pack; the emptied packs go in a later run; every live file still reads.
func TestPacksCompacted(t *testing.T) {
	f := newPackFixture(t)
	ctx := context.Background()
	a := f.layer("a", 40)
	b := f.layer("b", 40)
	keep := f.layer("keep", 40)
	f.kill("a", a[:30])
	f.kill("b", b[:30])
	// What a and b still hold stays referenced by another layer.
	if _, err := f.meta.AddLayerRefs(ctx, digest.FromString("rest"), append(a[30:], b[30:]...)); err != nil {
		t.Fatal(err)
	}

	dry := f.gc(Options{DryRun: true})
	if dry.Packs.Compacted != 2 || len(f.packs()) != 3 {
		t.Fatalf("dry run %+v, %d packs", *dry.Packs, len(f.packs()))
	}
	rep := f.gc(Options{Delay: time.Hour})
	if rep.Packs.Compacted != 2 || rep.Packs.FilesMoved != 20 || rep.Packs.CompactErrors != 0 {
		t.Fatalf("report %+v, want 2 packs compacted, 20 files moved", *rep.Packs)
	}
	if n := len(f.packs()); n != 4 {
		t.Fatalf("%d packs, want 3 old and 1 new", n)
	}
	rep = f.gc(Options{})
	if rep.Packs.Deleted != 2 || len(f.packs()) != 2 || f.objects() != 2 {
		t.Fatalf("report %+v, %d records, %d objects; want 2 deleted, 2 left", *rep.Packs, len(f.packs()), f.objects())
	}
	for _, set := range [][]digest.Digest{a[30:], b[30:], keep} {
		for _, d := range set {
			rc, err := f.store.Open(ctx, d)
			if err != nil {
				t.Fatalf("file %s: %v", d, err)
			}
			rc.Close()
		}
	}
	// A full pack and a fresh one: nothing to do.
	rep = f.gc(Options{})
	if rep.Packs.Compacted != 0 || rep.Packs.Deleted != 0 {
		t.Fatalf("third run %+v", *rep.Packs)
	}
}

// TestPacksUnrecordedKept: with an index that lost a pack's record (a
// metadata store rebuilt, or restored from an older copy), the pack still
// holding referenced files that nothing else locates is adopted, not
// deleted as an orphan; with an index not known complete for this storage,
// no pack and no unreferenced file is deleted at all.
func TestPacksUnrecordedKept(t *testing.T) {
	f := newPackFixture(t)
	ctx := context.Background()
	live := f.layer("live", 5)
	dead := f.layer("dead", 5)
	f.kill("dead", dead)
	ps := f.packs()
	if len(ps) != 2 {
		t.Fatalf("%d packs", len(ps))
	}
	// Lose the records: the live pack's files are then located nowhere.
	for _, p := range ps {
		if p.Live > 0 {
			ok, err := f.meta.TombstonePack(ctx, p.ID, 0)
			if ok || err != nil {
				t.Fatalf("tombstoned a live pack: %v %v", ok, err)
			}
		}
	}
	lost, err := bolt.Open(filepath.Join(t.TempDir(), "lost.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer lost.Close()
	if _, err := lost.AddLayerRefs(ctx, digest.FromString("live"), live); err != nil {
		t.Fatal(err)
	}
	f.meta = lost
	if f.store, err = pack.NewStore(f.d, lost, pack.Options{}, nil); err != nil {
		t.Fatal(err)
	}

	incomplete := func(context.Context) (bool, error) { return false, nil }
	rep := f.gc(Options{DedupComplete: incomplete})
	if rep.Packs.Orphans != 0 || rep.Packs.Deleted != 0 || f.objects() != 2 || rep.DedupIndex == "complete" {
		t.Fatalf("with an incomplete index: %+v, %d objects, index %q", *rep.Packs, f.objects(), rep.DedupIndex)
	}
	rep = f.gc(Options{})
	if rep.Packs.Adopted != 1 || rep.Packs.Orphans != 1 || f.objects() != 1 {
		t.Fatalf("report %+v, %d objects; want the live pack adopted, the dead one deleted", *rep.Packs, f.objects())
	}
	if rec := f.packs(); len(rec) != 1 || rec[0].Live == 0 {
		t.Fatalf("records after adoption: %+v", rec)
	}
	for _, d := range live {
		rc, err := f.store.Open(ctx, d)
		if err != nil {
			t.Fatalf("file %s after adoption: %v", d, err)
		}
		rc.Close()
	}
}
