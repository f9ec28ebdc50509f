package metatest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/opencontainers/go-digest"
)

func fileInfo(t *testing.T, s meta.Store, d digest.Digest) meta.FileInfo {
	t.Helper()
	return must(s.Files(context.Background(), []digest.Digest{d}))(t)[0]
}

func refCounts(t *testing.T, s meta.Store, files ...digest.Digest) []int64 {
	t.Helper()
	var out []int64
	for _, fi := range must(s.Files(context.Background(), files))(t) {
		out = append(out, fi.Refs)
	}
	return out
}

func addLayer(t *testing.T, s meta.Store, layer digest.Digest, files ...digest.Digest) []meta.FileRef {
	t.Helper()
	return must(s.AddLayerRefs(context.Background(), layer, files))(t)
}

func release(t *testing.T, s meta.Store, layer digest.Digest) []digest.Digest {
	t.Helper()
	return must(s.ReleaseLayerRefs(context.Background(), layer))(t)
}

// sameSet reports whether a and b hold the same digests, ignoring order.
func sameSet(a, b []digest.Digest) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// sha512Digest is a valid non-sha256 digest, which stores keep in another form.
func sha512Digest(n int) digest.Digest {
	return digest.Digest(fmt.Sprintf("sha512:%0128x", n))
}

func testLayerRefs(t *testing.T, s meta.Store) {
	ctx := context.Background()
	a, b, c := Digest("a"), Digest("b"), sha512Digest(9)
	l1, l2 := Digest("l1"), Digest("l2")
	got := addLayer(t, s, l1, a, b, a, c)
	want := []meta.FileRef{
		{Digest: a, Refs: 1, Write: true}, {Digest: b, Refs: 1, Write: true},
		{Digest: a, Refs: 1}, {Digest: c, Refs: 1, Write: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("first add = %+v, want %+v", got, want)
	}
	got = addLayer(t, s, l2, a, c)
	if want := []meta.FileRef{{Digest: a, Refs: 2}, {Digest: c, Refs: 2}}; !slices.Equal(got, want) {
		t.Fatalf("second layer = %+v, want %+v", got, want)
	}
	if held := must(s.LayerFiles(ctx, l1))(t); !sameSet(held, []digest.Digest{a, b, c}) {
		t.Fatalf("LayerFiles(l1) = %v, want a, b, c once each", held)
	}
	if zeroed := release(t, s, l1); !slices.Equal(zeroed, []digest.Digest{b}) {
		t.Fatalf("release l1 zeroed %v, want [b]", zeroed)
	}
	if r := refCounts(t, s, a, b, c); !slices.Equal(r, []int64{1, 0, 1}) {
		t.Fatalf("refs after release = %v, want [1 0 1]", r)
	}
	if _, err := s.LayerFiles(ctx, l1); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("LayerFiles of released layer: err = %v, want ErrNotFound", err)
	}
	if zeroed := release(t, s, l1); zeroed != nil {
		t.Fatalf("second release zeroed %v, want nil", zeroed)
	}
	if r := refCounts(t, s, a, b, c); !slices.Equal(r, []int64{1, 0, 1}) {
		t.Fatalf("refs after second release = %v, want [1 0 1]", r)
	}
	if zeroed := release(t, s, l2); !sameSet(zeroed, []digest.Digest{a, c}) {
		t.Fatalf("release l2 zeroed %v, want a, c", zeroed)
	}
	// A zero-count file that is re-added before any tombstone needs no write.
	if got := addLayer(t, s, Digest("l3"), b); got[0] != (meta.FileRef{Digest: b, Refs: 1}) {
		t.Fatalf("re-add of zero-count file = %+v, want refs 1 without write", got[0])
	}
	if zeroed := release(t, s, Digest("never added")); zeroed != nil {
		t.Fatalf("release of unknown layer zeroed %v", zeroed)
	}
	if fi := fileInfo(t, s, Digest("unknown")); fi.Exists || fi.Refs != 0 {
		t.Fatalf("unknown file = %+v, want no entry", fi)
	}
}

// testLayerRefsRetry checks that a dedup retried after a crash counts nothing.
func testLayerRefsRetry(t *testing.T, s meta.Store) {
	ctx := context.Background()
	a, b, c := Digest("a"), Digest("b"), Digest("c")
	l1 := Digest("l1")
	addLayer(t, s, l1, a, b)
	addLayer(t, s, Digest("l2"), b)
	got := addLayer(t, s, l1, b, a, b) // same set, another order, a duplicate
	want := []meta.FileRef{{Digest: b, Refs: 2}, {Digest: a, Refs: 1}, {Digest: b, Refs: 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("retried add = %+v, want %+v", got, want)
	}
	if r := refCounts(t, s, a, b); !slices.Equal(r, []int64{1, 2}) {
		t.Fatalf("refs after retry = %v, want [1 2]", r)
	}
	// A different set is refused and changes nothing.
	for _, files := range [][]digest.Digest{{a, c}, {a}, {a, b, c}, nil} {
		if _, err := s.AddLayerRefs(ctx, l1, files); !errors.Is(err, meta.ErrLayerFilesDiffer) {
			t.Fatalf("add of %d other files: err = %v, want ErrLayerFilesDiffer", len(files), err)
		}
	}
	if r := refCounts(t, s, a, b, c); !slices.Equal(r, []int64{1, 2, 0}) || fileInfo(t, s, c).Exists {
		t.Fatalf("refused adds changed refs: %v", r)
	}
	if held := must(s.LayerFiles(ctx, l1))(t); !sameSet(held, []digest.Digest{a, b}) {
		t.Fatalf("LayerFiles after refused adds = %v", held)
	}
	// Released, the layer may take a new set.
	if zeroed := release(t, s, l1); !slices.Equal(zeroed, []digest.Digest{a}) {
		t.Fatalf("release zeroed %v, want [a]", zeroed)
	}
	got = addLayer(t, s, l1, a, c)
	if want := []meta.FileRef{{Digest: a, Refs: 1}, {Digest: c, Refs: 1, Write: true}}; !slices.Equal(got, want) {
		t.Fatalf("add after release = %+v, want %+v", got, want)
	}
}

func testEmptyLayer(t *testing.T, s meta.Store) {
	ctx := context.Background()
	l, a := Digest("empty"), Digest("a")
	for _, files := range [][]digest.Digest{nil, {}} {
		if got := must(s.AddLayerRefs(ctx, l, files))(t); len(got) != 0 {
			t.Fatalf("add of no files = %+v", got)
		}
	}
	if _, err := s.LayerFiles(ctx, l); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("LayerFiles of empty layer: err = %v, want ErrNotFound", err)
	}
	if zeroed := release(t, s, l); zeroed != nil {
		t.Fatalf("release of empty layer zeroed %v", zeroed)
	}
	// It holds nothing, so a later add with files counts them.
	if got := addLayer(t, s, l, a); got[0] != (meta.FileRef{Digest: a, Refs: 1, Write: true}) {
		t.Fatalf("add after empty add = %+v", got[0])
	}
}

func testTombstoneLifecycle(t *testing.T, s meta.Store) {
	ctx := context.Background()
	a := Digest("a")
	if ok := must(s.Tombstone(ctx, a))(t); ok {
		t.Fatal("Tombstone of unknown file = true")
	}
	addLayer(t, s, Digest("l1"), a)
	if ok := must(s.Tombstone(ctx, a))(t); ok {
		t.Fatal("Tombstone of referenced file = true")
	}
	if _, err := s.DropFileEntry(ctx, a); !errors.Is(err, meta.ErrNotTombstoned) {
		t.Fatalf("DropFileEntry of live file: err = %v, want ErrNotTombstoned", err)
	}
	release(t, s, Digest("l1"))
	if ok := must(s.Tombstone(ctx, a))(t); !ok {
		t.Fatal("Tombstone of zero-count file = false")
	}
	if ok := must(s.Tombstone(ctx, a))(t); !ok {
		t.Fatal("second Tombstone = false, want idempotent true")
	}
	if fi := fileInfo(t, s, a); !fi.Tombstoned || fi.Refs != 0 {
		t.Fatalf("after Tombstone = %+v", fi)
	}
	// A dedup meeting the tombstone revives the file: it must write it anew and
	// wait for the GC run.
	got := addLayer(t, s, Digest("l2"), a, a)
	if got[0] != (meta.FileRef{Digest: a, Refs: 1, Write: true, Revived: true}) || got[1] != (meta.FileRef{Digest: a, Refs: 1}) {
		t.Fatalf("add of tombstoned file = %+v, want one write, revived", got)
	}
	if ok := must(s.Tombstone(ctx, a))(t); ok {
		t.Fatal("Tombstone of revived file = true")
	}
	// Until GC settles the tombstone its delete may still land, for any new holder.
	if got := addLayer(t, s, Digest("l3"), a); got[0] != (meta.FileRef{Digest: a, Refs: 2, Write: true, Revived: true}) {
		t.Fatalf("add while the revive is unsettled = %+v, want write, revived", got[0])
	}
	if got := addLayer(t, s, Digest("l2"), a); got[0] != (meta.FileRef{Digest: a, Refs: 2, Write: true, Revived: true}) {
		t.Fatalf("retry of the reviver while unsettled = %+v, want write, revived", got[0])
	}
	// GC finishes its delete after the revive: the entry stays and is marked Missing.
	if revived := must(s.DropFileEntry(ctx, a))(t); !revived {
		t.Fatal("DropFileEntry after revive: revived = false")
	}
	if fi := fileInfo(t, s, a); !fi.Exists || !fi.Missing || fi.Refs != 2 || fi.Tombstoned {
		t.Fatalf("after racing delete = %+v, want 2 refs, missing", fi)
	}
	// The normal end: zero, tombstone, delete; the entry is gone.
	release(t, s, Digest("l2"))
	if zeroed := release(t, s, Digest("l3")); !slices.Equal(zeroed, []digest.Digest{a}) {
		t.Fatalf("last release zeroed %v, want [a]", zeroed)
	}
	if ok := must(s.Tombstone(ctx, a))(t); !ok {
		t.Fatal("Tombstone = false")
	}
	if revived := must(s.DropFileEntry(ctx, a))(t); revived {
		t.Fatal("DropFileEntry of tombstoned file: revived = true")
	}
	if fi := fileInfo(t, s, a); fi.Exists {
		t.Fatalf("entry after DropFileEntry = %+v", fi)
	}
	if revived := must(s.DropFileEntry(ctx, a))(t); revived {
		t.Fatal("DropFileEntry of no entry: revived = true")
	}
	if got := addLayer(t, s, Digest("l4"), a); got[0] != (meta.FileRef{Digest: a, Refs: 1, Write: true}) {
		t.Fatalf("add after delete = %+v, want write, 1 ref, not revived", got[0])
	}
}

// testMissingFile follows a file whose revive raced GC's delete.
func testMissingFile(t *testing.T, s meta.Store) {
	ctx := context.Background()
	a, l1 := Digest("a"), Digest("l1")
	addLayer(t, s, Digest("l0"), a)
	release(t, s, Digest("l0"))
	must(s.Tombstone(ctx, a))(t)
	if got := addLayer(t, s, l1, a); !got[0].Write || !got[0].Revived {
		t.Fatalf("revive = %+v, want write, revived", got[0])
	}
	if revived := must(s.DropFileEntry(ctx, a))(t); !revived {
		t.Fatal("DropFileEntry after revive: revived = false")
	}
	// The reviver, retrying, learns that its copy may be gone. Retries only
	// report: the file stays Missing until a new holder is told to write it.
	for range 2 {
		if got := addLayer(t, s, l1, a); got[0] != (meta.FileRef{Digest: a, Refs: 1, Write: true}) {
			t.Fatalf("retry of reviver = %+v, want write, 1 ref, not revived", got[0])
		}
		if fi := fileInfo(t, s, a); !fi.Missing || fi.Refs != 1 {
			t.Fatalf("after retry = %+v, want missing, 1 ref", fi)
		}
	}
	if got := addLayer(t, s, Digest("l2"), a); got[0] != (meta.FileRef{Digest: a, Refs: 2, Write: true}) {
		t.Fatalf("new holder of missing file = %+v, want write, 2 refs", got[0])
	}
	if fi := fileInfo(t, s, a); fi.Missing {
		t.Fatalf("missing flag kept after a write was handed out: %+v", fi)
	}
	if got := addLayer(t, s, l1, a); got[0] != (meta.FileRef{Digest: a, Refs: 2}) {
		t.Fatalf("retry after the write = %+v, want no write", got[0])
	}
	if got := addLayer(t, s, Digest("l3"), a); got[0] != (meta.FileRef{Digest: a, Refs: 3}) {
		t.Fatalf("next holder = %+v, want no write, 3 refs", got[0])
	}
}

// testTombstoneRace runs dedup (AddLayerRefs, then write if told) against GC
// (Tombstone, delete the object, DropFileEntry) on many zero-count files at once, over
// a simulated object store, and checks that no file ends referenced, present in the
// index as fine, and absent from the object store.
func testTombstoneRace(t *testing.T, s meta.Store) { tombstoneRace(t, s, false) }

// testTombstoneRaceBulk is testTombstoneRace with GC taking its steps in bulk.
func testTombstoneRaceBulk(t *testing.T, s meta.Store) { tombstoneRace(t, s, true) }

func tombstoneRace(t *testing.T, s meta.Store, bulk bool) {
	ctx := context.Background()
	const n = 64
	files := Digests("race", n)
	addLayer(t, s, Digest("race-base"), files...)
	release(t, s, Digest("race-base"))

	var mu sync.Mutex
	objects := map[digest.Digest]bool{}
	for _, d := range files {
		objects[d] = true
	}
	type outcome struct{ write, revived, tomb bool }
	out := make([]outcome, n)
	var wg sync.WaitGroup
	if bulk {
		// GC's batches of 8, all at once.
		for b := 0; b < n; b += 8 {
			wg.Go(func() {
				batch := files[b : b+8]
				tomb, err := s.TombstoneFiles(ctx, batch)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, d := range tomb {
					out[slices.Index(files, d)].tomb = true
					delete(objects, d)
				}
				mu.Unlock()
				if _, err := s.DropFileEntries(ctx, tomb); err != nil {
					t.Error(err)
				}
			})
		}
	}
	for i, d := range files {
		wg.Go(func() {
			r, err := s.AddLayerRefs(ctx, Digest(fmt.Sprintf("race-layer-%d", i)), []digest.Digest{d})
			if err != nil {
				t.Error(err)
				return
			}
			out[i].write, out[i].revived = r[0].Write, r[0].Revived
			if r[0].Write {
				mu.Lock()
				objects[d] = true
				mu.Unlock()
			}
		})
		if bulk {
			continue
		}
		wg.Go(func() {
			ok, err := s.Tombstone(ctx, d)
			if err != nil {
				t.Error(err)
				return
			}
			out[i].tomb = ok
			if !ok {
				return
			}
			mu.Lock()
			delete(objects, d)
			mu.Unlock()
			if _, err := s.DropFileEntry(ctx, d); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	infos := must(s.Files(ctx, files))(t)
	for i, fi := range infos {
		o := out[i]
		if o.tomb && !o.write {
			t.Errorf("%d: tombstone and add both won: %+v", i, o)
		}
		if !o.tomb && (o.write || o.revived) {
			t.Errorf("%d: add was told to write a live file: %+v", i, o)
		}
		if o.revived && !o.write {
			t.Errorf("%d: revived without write: %+v", i, o)
		}
		if fi.Refs != 1 || fi.Tombstoned {
			t.Errorf("%d: final entry %+v, want 1 ref, not tombstoned", i, fi)
		}
		if !objects[files[i]] && !fi.Missing {
			t.Errorf("%d: object lost and the index does not say so: %+v %+v", i, o, fi)
		}
	}
}

func testZeroFiles(t *testing.T, s meta.Store) {
	ctx := context.Background()
	var files []digest.Digest
	for i := range 10 {
		files = append(files, Digest(fmt.Sprintf("z-%d", i)))
	}
	addLayer(t, s, Digest("lz"), files[:7]...)
	addLayer(t, s, Digest("ly"), files[7:]...)
	release(t, s, Digest("lz"))
	must(s.Tombstone(ctx, files[0]))(t)
	must(s.DropFileEntry(ctx, files[0]))(t)
	addLayer(t, s, Digest("lx"), files[1])
	var got []digest.Digest
	var after digest.Digest
	for {
		page := must(s.ZeroFiles(ctx, after, 2))(t)
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("page of %d > limit 2", len(page))
		}
		got = append(got, page...)
		after = page[len(page)-1]
	}
	if !sameSet(got, files[2:7]) {
		t.Fatalf("ZeroFiles = %v, want %v", got, files[2:7])
	}
}

// testLayerRefsConcurrent races many layers sharing files, each added by two
// workers at once (as a retried dedup might be) and half of them released.
func testLayerRefsConcurrent(t *testing.T, s meta.Store) {
	ctx := context.Background()
	const nLayers, poolSize, perLayer = 48, 40, 12
	pool := make([]digest.Digest, poolSize)
	for i := range pool {
		pool[i] = Digest(fmt.Sprintf("pool-%d", i))
	}
	evenOnly := []digest.Digest{Digest("even-0"), Digest("even-1"), Digest("even-2")}
	layers := make([]digest.Digest, nLayers)
	held := make([][]digest.Digest, nLayers)
	want := map[digest.Digest]int64{}
	for l := range layers {
		layers[l] = Digest(fmt.Sprintf("conc-layer-%d", l))
		for k := range perLayer {
			held[l] = append(held[l], pool[(l*7+k)%poolSize])
		}
		if l%2 == 0 {
			held[l] = append(held[l], evenOnly[l%len(evenOnly)])
		}
		for _, d := range held[l] {
			if l%2 == 1 {
				want[d]++
			} else if _, ok := want[d]; !ok {
				want[d] = 0
			}
		}
	}
	var mu sync.Mutex
	writes := map[digest.Digest]int{}
	zeroed := map[digest.Digest]bool{}
	var wg sync.WaitGroup
	for l := range layers {
		files := append(slices.Clone(held[l]), held[l][0]) // with a duplicate
		for range 2 {
			wg.Go(func() {
				r, err := s.AddLayerRefs(ctx, layers[l], files)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for i, ref := range r {
					if ref.Digest != files[i] || ref.Refs < 1 || ref.Revived {
						t.Errorf("layer %d file %d: %+v", l, i, ref)
					}
					if ref.Write {
						writes[ref.Digest]++
					}
				}
				mu.Unlock()
				if l%2 == 1 {
					return
				}
				z, err := s.ReleaseLayerRefs(ctx, layers[l])
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, d := range z {
					zeroed[d] = true
				}
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	// Nothing was ever tombstoned, so each file was unknown exactly once.
	for d := range want {
		if writes[d] != 1 {
			t.Errorf("%s: told to write %d times, want 1", d, writes[d])
		}
	}
	var wantZero []digest.Digest
	for d, n := range want {
		if got := fileInfo(t, s, d); got.Refs != n {
			t.Errorf("%s: %d refs, want %d", d, got.Refs, n)
		}
		if n == 0 {
			wantZero = append(wantZero, d)
			if !zeroed[d] {
				t.Errorf("%s: ended at zero but no release reported it", d)
			}
		}
	}
	if got := must(s.ZeroFiles(ctx, "", 1000))(t); !sameSet(got, wantZero) || len(wantZero) != len(evenOnly) {
		t.Errorf("ZeroFiles = %v, want %v", got, wantZero)
	}
	for l, layer := range layers {
		got, err := s.LayerFiles(ctx, layer)
		switch {
		case l%2 == 0 && !errors.Is(err, meta.ErrNotFound):
			t.Errorf("released layer %d: LayerFiles = %v, %v", l, got, err)
		case l%2 == 1 && (err != nil || !sameSet(got, held[l])):
			t.Errorf("layer %d: LayerFiles = %v, %v", l, got, err)
		}
	}
}

// testLargeLayer checks that one call handles a layer of many files.
func testLargeLayer(t *testing.T, s meta.Store) {
	ctx := context.Background()
	const n = 50_000
	files := Digests("big", n)
	big, half := Digest("big"), Digest("half")
	got := addLayer(t, s, big, files...)
	if len(got) != n {
		t.Fatalf("add returned %d refs, want %d", len(got), n)
	}
	for i, r := range got {
		if r != (meta.FileRef{Digest: files[i], Refs: 1, Write: true}) {
			t.Fatalf("ref %d = %+v", i, r)
		}
	}
	addLayer(t, s, half, files[:n/2]...)
	for i, r := range addLayer(t, s, big, files...) {
		want := int64(1)
		if i < n/2 {
			want = 2
		}
		if r.Refs != want || r.Write {
			t.Fatalf("retried ref %d = %+v, want %d refs, no write", i, r, want)
		}
	}
	if held := must(s.LayerFiles(ctx, big))(t); !sameSet(held, files) {
		t.Fatalf("LayerFiles holds %d files, want %d", len(held), n)
	}
	if zeroed := release(t, s, big); !sameSet(zeroed, files[n/2:]) {
		t.Fatalf("release zeroed %d files, want %d", len(zeroed), n/2)
	}
	if zeroed := release(t, s, half); !sameSet(zeroed, files[:n/2]) {
		t.Fatalf("release zeroed %d files, want %d", len(zeroed), n/2)
	}
}
