package dedup

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// indexSnapshot is what serving and GC read of the metadata: each layer's
// state and files, each file's references and location, each pack's live
// bytes and size.
type indexSnapshot struct {
	States map[digest.Digest]meta.LayerState
	Layers map[digest.Digest][]digest.Digest
	Files  map[digest.Digest]meta.FileInfo
	Packs  map[string][2]int64 // live, size
	Counts map[meta.LayerState]int64
}

func snapshot(t *testing.T, s meta.Store, layers []digest.Digest) indexSnapshot {
	t.Helper()
	ctx := context.Background()
	snap := indexSnapshot{States: map[digest.Digest]meta.LayerState{}, Layers: map[digest.Digest][]digest.Digest{},
		Files: map[digest.Digest]meta.FileInfo{}, Packs: map[string][2]int64{}}
	for _, l := range layers {
		if _, st, err := s.GetLayer(ctx, l); err == nil {
			snap.States[l] = st
		} else if !errors.Is(err, meta.ErrNotFound) {
			t.Fatal(err)
		}
		fs, err := s.LayerFiles(ctx, l)
		if errors.Is(err, meta.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		snap.Layers[l] = fs
		infos, err := s.Files(ctx, fs)
		if err != nil {
			t.Fatal(err)
		}
		for _, fi := range infos {
			snap.Files[fi.Digest] = fi
		}
	}
	ps, err := s.ListPacks(ctx, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		snap.Packs[p.ID] = [2]int64{p.Live, p.Size}
	}
	if snap.Counts, err = s.LayerCounts(ctx); err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestReindexRebuildsWhatWasLost: a metadata store lost after layers were
// deduplicated (full and index modes, files shared between layers) is
// rebuilt from the recipes and pack indexes with the same references,
// locations, pack live bytes and layer states; every layer then restores
// byte for byte through the rebuilt store, and a second reindex changes
// nothing.
func TestReindexRebuildsWhatWasLost(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil, Options{})
	ls := sharedLayers(t)
	var layers []digest.Digest
	for i, l := range ls {
		d := v.put(l.blob)
		layers = append(layers, d)
		mode, want := ModeFull, outDeduplicated
		if i == 0 {
			mode, want = ModeIndex, outIndexed
		}
		v.process(d, mode, want)
	}
	before := snapshot(t, v.store, layers)
	if len(before.Packs) == 0 || len(before.Files) == 0 {
		t.Fatalf("nothing deduplicated: %+v", before)
	}

	fresh := lostStore(t)
	st, err := CheckIndex(ctx, v.d, fresh)
	if err != nil || st.Complete() {
		t.Fatalf("a new metadata store counts as complete: %+v, %v", st, err)
	}
	rs, err := Reindex(ctx, v.d, fresh, ReindexOptions{})
	if err != nil || !rs.Complete {
		t.Fatalf("reindex: %+v, %v", rs, err)
	}
	if rs.Recipes != int64(len(ls)) || rs.Intact != 1 || rs.Deduplicated != int64(len(ls)-1) {
		t.Fatalf("reindex found %+v; want %d recipes, 1 intact", rs, len(ls))
	}
	after := snapshot(t, fresh, layers)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("rebuilt index differs:\nbefore %+v\nafter  %+v", before, after)
	}
	if st, err := CheckIndex(ctx, v.d, fresh); err != nil || !st.Complete() || st.StoreID == "" {
		t.Fatalf("after reindex: %+v, %v", st, err)
	}

	// Pulls through the rebuilt store.
	eng, err := New(v.d, fresh, Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	for i := range ls {
		if got := readAll(t, eng, layers[i]); digest.FromBytes(got) != layers[i] {
			t.Fatalf("layer %d rebuilt wrong through the reindexed store", i)
		}
	}

	// Idempotent: a second run over a complete index changes nothing.
	rs2, err := Reindex(ctx, v.d, fresh, ReindexOptions{})
	if err != nil || !rs2.Complete || rs2.Placed != 0 || rs2.Known != int64(len(ls)) {
		t.Fatalf("second reindex: %+v, %v", rs2, err)
	}
	if again := snapshot(t, fresh, layers); !reflect.DeepEqual(before, again) {
		t.Fatalf("second reindex changed the index:\nbefore %+v\nafter  %+v", before, again)
	}
}

// TestReindexIncompleteOnUnreadableRecipe: a recipe that cannot be read
// (not: damaged) leaves the index incomplete, so GC keeps every pack.
func TestReindexIncompleteOnUnreadableRecipe(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil, Options{})
	ls := sharedLayers(t)
	l := v.put(ls[1].blob)
	v.process(l, ModeFull, outDeduplicated)
	fresh := lostStore(t)
	rs, err := Reindex(ctx, failingRecipes{v.d}, fresh, ReindexOptions{})
	if err != nil || rs.Complete || rs.Errors != 1 {
		t.Fatalf("reindex over an unreadable recipe: %+v, %v; want incomplete, 1 error", rs, err)
	}
	if st, _ := CheckIndex(ctx, v.d, fresh); st.Complete() {
		t.Fatal("index marked complete although a recipe was not read")
	}

	// A damaged recipe is reported and does not keep it incomplete.
	if err := v.d.PutContent(ctx, layout.BlobRecipe(l), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	rs, err = Reindex(ctx, v.d, fresh, ReindexOptions{})
	if err != nil || !rs.Complete || rs.Damaged != 1 {
		t.Fatalf("reindex over a damaged recipe: %+v, %v", rs, err)
	}
}

// TestStoreIDStable: the storage's id is written once and read back.
func TestStoreIDStable(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil, Options{})
	if id, err := StoreID(ctx, v.d, false); err != nil || id != "" {
		t.Fatalf("fresh storage has id %q, %v", id, err)
	}
	a, err := StoreID(ctx, v.d, true)
	if err != nil || len(a) != 32 {
		t.Fatalf("new id %q, %v", a, err)
	}
	b, err := StoreID(ctx, v.d, true)
	if err != nil || a != b {
		t.Fatalf("id changed: %q then %q (%v)", a, b, err)
	}
	if err := v.store.SetStoreID(ctx, "0123"); err != nil {
		t.Fatal(err)
	}
	st, err := CheckIndex(ctx, v.d, v.store)
	if err != nil || !st.Foreign() || st.Complete() {
		t.Fatalf("metadata of another storage: %+v, %v", st, err)
	}
	if !slices.Contains([]string{a}, st.StoreID) {
		t.Fatalf("storage id %q", st.StoreID)
	}
}

// failingRecipes fails every read of a recipe file, as a storage outage.
type failingRecipes struct{ driver.Driver }

func (f failingRecipes) GetContent(ctx context.Context, p string) ([]byte, error) {
	if strings.HasSuffix(p, "/"+layout.BlobRecipeLeaf) {
		return nil, errors.New("storage unavailable")
	}
	return f.Driver.GetContent(ctx, p)
}

func readAll(t *testing.T, e *Engine, d digest.Digest) []byte {
	t.Helper()
	rc, err := e.OpenBlob(context.Background(), d, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReindexingRefusesBeforeHeaders: while the metadata is being rebuilt,
// a layer whose files are not located yet is refused (ErrReindexing, a 503
// for the client) before any byte, and served once they are.
func TestReindexingRefusesBeforeHeaders(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil, Options{})
	ls := sharedLayers(t)
	l := v.put(ls[1].blob)
	v.process(l, ModeFull, outDeduplicated)

	fresh := lostStore(t)
	eng, err := New(v.d, fresh, Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	eng.reindexing.Store(true)
	if _, err := eng.OpenBlob(ctx, l, 0); !errors.Is(err, ErrReindexing) || !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("open during a reindex: %v; want ErrReindexing (unavailable)", err)
	}
	if _, err := Reindex(ctx, v.d, fresh, ReindexOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, eng, l); digest.FromBytes(got) != l {
		t.Fatal("layer rebuilt wrong once located")
	}
}

// lostStore is a new, empty metadata store: the one a lost store is
// replaced by.
func lostStore(t *testing.T) *bolt.Store {
	t.Helper()
	s, err := bolt.OpenWith(filepath.Join(t.TempDir(), "lost.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
