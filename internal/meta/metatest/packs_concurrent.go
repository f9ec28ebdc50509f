package metatest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/meta"
)

// testPackConcurrent races writers placing the same files into their own
// packs, compactions moving them on conditionally, GC dropping some files
// (and a dedup reviving some of those), and a pack GC deleting every empty
// pack it can. Whatever the interleaving, each pack's Live must end as the
// sum of the files located in it, and no file may point into a pack without
// a record.
func testPackConcurrent(t *testing.T, s meta.Store) {
	ctx := context.Background()
	const nFiles, nWriters, nCompactors, rounds = 40, 6, 2, 12
	files := make([]digest.Digest, nFiles)
	for i := range files {
		files[i] = Digest(fmt.Sprintf("conc-%d", i))
	}
	addLayer(t, s, Digest("keep"), files[:30]...)
	addLayer(t, s, Digest("gc"), files[30:]...)
	release(t, s, Digest("gc"))

	// ErrPackGone is a possible outcome here: the pack GC may have taken
	// the pack while it was empty.
	placeOrGone := func(id string, size int64, ps []meta.Placement) {
		if _, err := s.PlaceFiles(ctx, id, size, ps); err != nil && !errors.Is(err, meta.ErrPackGone) {
			t.Error(err)
		}
	}
	// workers are the writers and compactors, whom the pack GC runs beside
	// until they are done.
	var wg, workers sync.WaitGroup
	for w := range nWriters {
		workers.Go(func() {
			id := fmt.Sprintf("w%d", w)
			for r := range rounds {
				if err := s.BeginPack(ctx, id); err != nil {
					t.Error(err)
					return
				}
				var ps []meta.Placement
				for i := (w + r) % 3; i < nFiles; i += 2 {
					ps = append(ps, at(files[i], int64(i*100), int64((w+1)*10+(i+r)%7)))
				}
				placeOrGone(id, nFiles*100, ps)
			}
		})
	}
	for c := range nCompactors {
		workers.Go(func() {
			for r := range rounds {
				id := fmt.Sprintf("c%d-%02d", c, r)
				if err := s.BeginPack(ctx, id); err != nil {
					t.Error(err)
					return
				}
				infos, err := s.Files(ctx, files)
				if err != nil {
					t.Error(err)
					return
				}
				var ps []meta.Placement
				for i, fi := range infos {
					if !fi.Location.IsZero() && (i+c)%2 == 0 {
						ps = append(ps, meta.Placement{Digest: fi.Digest, Offset: int64(len(ps)), Length: fi.Location.Length, From: fi.Location})
					}
				}
				placeOrGone(id, int64(len(ps)), ps)
			}
		})
	}
	wg.Go(func() {
		for _, batch := range [][]digest.Digest{files[30:35], files[35:]} {
			tomb, err := s.TombstoneFiles(ctx, batch)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := s.DropFileEntries(ctx, tomb); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Go(func() {
		if _, err := s.AddLayerRefs(ctx, Digest("revive"), files[33:38]); err != nil {
			t.Error(err)
		}
	})
	done := make(chan struct{})
	wg.Go(func() {
		workers.Wait()
		close(done)
	})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			packs, err := s.ListPacks(ctx, "", 1000)
			if err != nil {
				t.Error(err)
				return
			}
			for _, p := range packs {
				if p.Live != 0 {
					continue
				}
				ok, err := s.TombstonePack(ctx, p.ID, 0)
				if err != nil || !ok {
					if err != nil {
						t.Error(err)
					}
					continue
				}
				if ok, err := s.DeletePack(ctx, p.ID); err != nil || !ok {
					t.Errorf("DeletePack of tombstoned %s = %v, %v", p.ID, ok, err)
				}
			}
		}
	})
	wg.Wait()
	checkLive(t, s, files)
	for _, p := range allPacks(t, s, 100) {
		if p.Live < 0 || p.Tombstoned && p.Live != 0 {
			t.Errorf("pack %+v", p)
		}
	}
}

// OldFileEntries checks that a file entry written before packs, which has
// no location, still reads and takes part in everything. putOld writes d's
// entry in that format with refs references and no flags, behind the
// store's back (each store knows its own layout).
func OldFileEntries(t *testing.T, s meta.Store, putOld func(t *testing.T, d digest.Digest, refs int64)) {
	ctx := context.Background()
	f, g := Digest("old-f"), Digest("old-g")
	putOld(t, f, 1)
	putOld(t, g, 2)
	fi := must(s.Files(ctx, []digest.Digest{f, g}))(t)
	if !fi[0].Exists || fi[0].Refs != 1 || !fi[0].Location.IsZero() || fi[1].Refs != 2 || fi[1].Tombstoned || fi[1].Missing {
		t.Fatalf("old entries = %+v", fi)
	}
	if r := addLayer(t, s, Digest("l"), f, g); r[0].Refs != 2 || r[0].Write || r[1].Refs != 3 {
		t.Fatalf("add to old entries = %+v", r)
	}
	beginPack(t, s, "p")
	if got := place(t, s, "p", 100, at(f, 0, 60)); !got[0] {
		t.Fatal("old entry: not placed")
	}
	fi = must(s.Files(ctx, []digest.Digest{f, g}))(t)
	if fi[0].Refs != 2 || fi[0].Location != loc("p", 0, 60) || !fi[1].Location.IsZero() || fi[1].Refs != 3 {
		t.Fatalf("entries after the place = %+v", fi)
	}
	release(t, s, Digest("l"))
	if fi := fileInfo(t, s, f); fi.Refs != 1 || fi.Location != loc("p", 0, 60) {
		t.Fatalf("entry after the release = %+v", fi)
	}
	checkLive(t, s, []digest.Digest{f, g})
}
