package gc

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
)

// The metadata store is what cmd/cairn hands GC.
var _ DedupIndex = meta.Store(nil)

// testIndex is a DedupIndex the tests can also fill and inspect.
type testIndex interface {
	DedupIndex
	AddLayerRefs(ctx context.Context, layer digest.Digest, files []digest.Digest) ([]meta.FileRef, error)
	Files(ctx context.Context, digests []digest.Digest) ([]meta.FileInfo, error)
	PutLayer(ctx context.Context, layer digest.Digest, recipe []byte, state meta.LayerState) error
	GetLayer(ctx context.Context, layer digest.Digest) ([]byte, meta.LayerState, error)
}

// indexes are the implementations every dedup test runs against: the
// in-test fake and the embedded bolt store.
var indexes = []struct {
	name string
	new  func(t *testing.T) testIndex
}{
	{"fake", func(*testing.T) testIndex { return newFakeIndex() }},
	{"bolt", func(t *testing.T) testIndex {
		s, err := bolt.OpenWith(filepath.Join(t.TempDir(), "meta.db"), bolt.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

// fakeFile is one file entry, with meta's flags.
type fakeFile struct {
	refs                         int64
	tombstoned, revived, missing bool
}

// fakeIndex keeps meta's file lifecycle in maps.
type fakeIndex struct {
	mu      sync.Mutex
	files   map[digest.Digest]*fakeFile
	layers  map[digest.Digest][]digest.Digest // distinct files each layer holds
	recipes map[digest.Digest]meta.LayerState
}

func newFakeIndex() *fakeIndex {
	return &fakeIndex{
		files:   make(map[digest.Digest]*fakeFile),
		layers:  make(map[digest.Digest][]digest.Digest),
		recipes: make(map[digest.Digest]meta.LayerState),
	}
}

func (x *fakeIndex) AddLayerRefs(_ context.Context, layer digest.Digest, files []digest.Digest) ([]meta.FileRef, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	set := slices.Clone(files)
	slices.Sort(set)
	set = slices.Compact(set)
	held, has := x.layers[layer]
	if has && !slices.Equal(held, set) {
		return nil, fmt.Errorf("%w: %s", meta.ErrLayerFilesDiffer, layer)
	}
	// Outcomes from the state before the add, as meta reports them.
	refs := make(map[digest.Digest]meta.FileRef, len(set))
	for _, d := range set {
		e, ok := x.files[d]
		if !ok {
			e = &fakeFile{}
		}
		revived := e.tombstoned || e.revived
		r := meta.FileRef{Digest: d, Write: !ok || revived || e.missing, Revived: revived}
		if !has {
			if e.tombstoned {
				e.revived = true
			}
			e.tombstoned, e.missing = false, false
			e.refs++
			x.files[d] = e
		}
		r.Refs = e.refs
		refs[d] = r
	}
	out := make([]meta.FileRef, len(files))
	seen := make(map[digest.Digest]bool)
	for i, d := range files {
		out[i] = refs[d]
		if seen[d] {
			out[i].Write, out[i].Revived = false, false
		}
		seen[d] = true
	}
	if !has && len(set) > 0 {
		x.layers[layer] = set
	}
	return out, nil
}

func (x *fakeIndex) ReleaseLayerRefs(_ context.Context, layer digest.Digest) ([]digest.Digest, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var zero []digest.Digest
	for _, d := range x.layers[layer] {
		e := x.files[d]
		if e == nil || e.refs <= 0 {
			return nil, fmt.Errorf("%w: %s", meta.ErrInvalidRelease, d)
		}
	}
	for _, d := range x.layers[layer] {
		e := x.files[d]
		if e.refs--; e.refs == 0 {
			zero = append(zero, d)
		}
	}
	delete(x.layers, layer)
	return zero, nil
}

func (x *fakeIndex) Tombstone(_ context.Context, d digest.Digest) (bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.files[d]
	if e == nil || e.refs > 0 {
		return false, nil
	}
	if !e.tombstoned {
		e.tombstoned, e.revived = true, false
	}
	return true, nil
}

func (x *fakeIndex) DeleteFile(_ context.Context, d digest.Digest) (bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.files[d]
	switch {
	case e == nil:
		return false, nil
	case e.tombstoned:
		delete(x.files, d)
		return false, nil
	case e.revived:
		e.revived, e.missing = false, true
		return true, nil
	}
	return false, fmt.Errorf("%w: %s", meta.ErrNotTombstoned, d)
}

func (x *fakeIndex) ZeroFiles(_ context.Context, after digest.Digest, limit int) ([]digest.Digest, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var all []digest.Digest
	for d, e := range x.files {
		if e.refs == 0 && d > after {
			all = append(all, d)
		}
	}
	slices.Sort(all)
	return all[:min(limit, len(all))], nil
}

func (x *fakeIndex) Files(_ context.Context, digests []digest.Digest) ([]meta.FileInfo, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]meta.FileInfo, len(digests))
	for i, d := range digests {
		out[i].Digest = d
		if e, ok := x.files[d]; ok {
			out[i] = meta.FileInfo{Digest: d, Exists: true, Refs: e.refs, Tombstoned: e.tombstoned, Missing: e.missing}
		}
	}
	return out, nil
}

func (x *fakeIndex) PutLayer(_ context.Context, layer digest.Digest, _ []byte, st meta.LayerState) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.recipes[layer] = st
	return nil
}

func (x *fakeIndex) GetLayer(_ context.Context, layer digest.Digest) ([]byte, meta.LayerState, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	st, ok := x.recipes[layer]
	if !ok {
		return nil, 0, meta.ErrNotFound
	}
	return nil, st, nil
}

func (x *fakeIndex) DeleteLayer(_ context.Context, layer digest.Digest) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.recipes, layer)
	return nil
}

// hookedIndex records releases and runs hooks around Tombstone, to place
// a dedup at an exact point of GC's file lifecycle.
type hookedIndex struct {
	testIndex
	mu                              sync.Mutex
	released                        []digest.Digest
	beforeTombstone, afterTombstone func(d digest.Digest)
}

func (h *hookedIndex) releasedLayers() []digest.Digest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.released)
}

// ReleaseLayers releases and drops the recipe of each layer in turn, each
// atomically, as meta.Bulk allows.
func (x *fakeIndex) ReleaseLayers(ctx context.Context, layers []digest.Digest) ([]digest.Digest, error) {
	var zero []digest.Digest
	for _, l := range layers {
		z, err := x.ReleaseLayerRefs(ctx, l)
		if err != nil {
			return zero, err
		}
		zero = append(zero, z...)
		if err := x.DeleteLayer(ctx, l); err != nil {
			return zero, err
		}
	}
	return zero, nil
}

func (x *fakeIndex) TombstoneFiles(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	var out []digest.Digest
	for _, d := range files {
		ok, err := x.Tombstone(ctx, d)
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// DropFileEntries marks an entry neither tombstoned nor revived Missing, as
// meta.Bulk does, where DeleteFile fails.
func (x *fakeIndex) DropFileEntries(_ context.Context, files []digest.Digest) ([]digest.Digest, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var revived []digest.Digest
	for _, d := range files {
		switch e := x.files[d]; {
		case e == nil:
		case e.tombstoned:
			delete(x.files, d)
		default:
			e.revived, e.missing = false, true
			revived = append(revived, d)
		}
	}
	return revived, nil
}

func (h *hookedIndex) ReleaseLayers(ctx context.Context, layers []digest.Digest) ([]digest.Digest, error) {
	h.mu.Lock()
	h.released = append(h.released, layers...)
	h.mu.Unlock()
	return h.testIndex.ReleaseLayers(ctx, layers)
}

// TombstoneFiles runs beforeTombstone for each file before the batch's
// tombstones, afterTombstone after them.
func (h *hookedIndex) TombstoneFiles(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	if h.beforeTombstone != nil {
		for _, d := range files {
			h.beforeTombstone(d)
		}
	}
	tomb, err := h.testIndex.TombstoneFiles(ctx, files)
	if h.afterTombstone != nil {
		for _, d := range files {
			h.afterTombstone(d)
		}
	}
	return tomb, err
}
