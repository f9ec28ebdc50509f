package dedup

import (
	"context"
	"errors"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Stats is `cairn dedup stats`: what dedup stores and saves.
type Stats struct {
	// LogicalBytes is the compressed size of every layer dedup knows: what
	// storage would hold without it.
	LogicalBytes int64       `json:"logicalBytes"`
	StoredBytes  StoredBytes `json:"storedBytes"`
	// Ratio is LogicalBytes over StoredBytes.Total.
	Ratio float64 `json:"ratio"`
	// FileLevelRatio is LogicalBytes over what storage would hold with
	// unique files kept uncompressed (file-level dedup alone).
	FileLevelRatio float64          `json:"fileLevelRatio"`
	Layers         map[string]int64 `json:"layers"`
	Files          FileStats        `json:"files"`
	// Encoders counts recipe members by the encoder that reproduces them.
	Encoders map[string]int64 `json:"encoders"`
	// DeferredImages counts pushed images waiting in storage to be
	// recorded (the metadata store was down when they came): their layers
	// are intact and counted nowhere else yet.
	DeferredImages int64 `json:"deferredImages"`
	// IntactWhy splits the layers stored intact by why they are: "index"
	// (their mode keeps the intact copy), "hot" (selective, pulled
	// often), "queued" (a mode that drops it, not done yet), "pending"
	// (being processed), "irreproducible" (no encoder reproduces them).
	IntactWhy map[string]LayerBytes `json:"intactWhy"`
	// MetadataBytes is what the metadata store occupies (the bolt file;
	// -1 where it is not known: Redis shares its memory with others).
	MetadataBytes int64 `json:"metadataBytes"`
}

// LayerBytes counts layers and their compressed bytes.
type LayerBytes struct {
	Layers int64 `json:"layers"`
	Bytes  int64 `json:"bytes"`
}

// intactWhy names why a layer in state, summarised by sum, is intact; ""
// when it is not.
func intactWhy(state meta.LayerState, sum summary) string {
	switch state {
	case meta.StatePending:
		return "pending"
	case meta.StateIrreproducible:
		return "irreproducible"
	case meta.StateIntact:
		switch sum.Mode {
		case ModeIndex:
			return "index"
		case ModeSelective:
			return "hot"
		}
		return "queued"
	}
	return ""
}

// StoredBytes splits what dedup-managed layers occupy in storage.
type StoredBytes struct {
	Intact  int64 `json:"intact"`  // intact copies still kept
	Files   int64 `json:"files"`   // unique files as stored (zstd or parse frames)
	Recipes int64 `json:"recipes"` // recipe files
	Total   int64 `json:"total"`
}

// FileStats describes the unique file store.
type FileStats struct {
	Unique int64 `json:"unique"`
	// Shared counts files that more than one layer holds.
	Shared int64 `json:"shared"`
	// Bytes is the uncompressed size of the unique files; StoredBytes
	// their size in storage.
	Bytes       int64 `json:"bytes"`
	StoredBytes int64 `json:"storedBytes"`
	// Packs is how many packs hold them; LiveBytes the frames located in
	// them, DeadBytes the frames no file uses any more (GC compacts sparse
	// packs), IndexBytes the packs' own headers, indexes and footers.
	Packs      int64 `json:"packs"`
	LiveBytes  int64 `json:"liveBytes"`
	DeadBytes  int64 `json:"deadBytes"`
	IndexBytes int64 `json:"indexBytes"`
	// Objects counts files stored one object each (before packs).
	Objects int64 `json:"objects"`
}

// Stats computes the statistics: one pass over the layer states, one read
// of each recipe file (for file sizes and sharing), one listing of the file
// store. Memory grows with the number of unique files.
func (sc *Statistics) Stats(ctx context.Context) (*Stats, error) {
	st, _, err := sc.stats(ctx)
	return st, err
}

// packStats adds what the packs and the per-file objects hold (one
// listing of each: a pack is tens of MiB, so its listing is short) and
// what the pack records count as no longer used.
func (sc *Statistics) packStats(ctx context.Context, fs *FileStats) error {
	// Each recorded pack's frames end where its index begins (its Size):
	// the rest of its object is the index.
	frames := make(map[string]int64)
	var after string
	for {
		page, err := sc.packs.ListPacks(ctx, after, 1000)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			if !p.Tombstoned {
				fs.LiveBytes += p.Live
				fs.DeadBytes += max(p.Size-pack.HeaderSize-p.Live, 0)
				frames[p.ID] = p.Size
			}
		}
		after = page[len(page)-1].ID
	}
	for _, dir := range []struct {
		path string
		n    *int64
	}{{layout.PacksDir, &fs.Packs}, {layout.FilesDir, &fs.Objects}} {
		err := sc.d.Walk(ctx, dir.path, func(fi driver.FileInfo) error {
			if fi.IsDir {
				return nil
			}
			*dir.n++
			fs.StoredBytes += fi.Size
			if id, ok := layout.ParsePackPath(fi.Path); ok {
				if size, ok := frames[id]; ok && size > 0 {
					// The header and the index are the pack's own bytes.
					fs.IndexBytes += max(fi.Size-size, 0) + pack.HeaderSize
				} else {
					fs.DeadBytes += fi.Size // no record: nothing reads it
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, driver.ErrNotFound) {
			return err
		}
	}
	return nil
}

// stats is Stats, also returning the layers recorded with a recipe whose
// recipe file is gone (a GC that stopped between deleting a blob and
// releasing its files leaves them): the worker rechecks those.
func (sc *Statistics) stats(ctx context.Context) (*Stats, []digest.Digest, error) {
	var gone []digest.Digest
	if sc.meta == nil {
		return nil, nil, errors.New("dedup: no metadata store")
	}
	st := &Stats{Layers: make(map[string]int64), Encoders: make(map[string]int64), IntactWhy: make(map[string]LayerBytes), MetadataBytes: -1}
	if sz, ok := sc.meta.(interface{ FileSize() (int64, error) }); ok {
		if n, err := sz.FileSize(); err == nil {
			st.MetadataBytes = n
		}
	}
	for _, s := range meta.States {
		st.Layers[s.String()] = 0
	}
	type fileUse struct {
		size   int64
		layers uint8
	}
	files := make(map[digest.Digest]*fileUse)
	for _, state := range meta.States {
		var ferr error
		err := sc.eachLayer(ctx, state, func(l digest.Digest, sum summary) {
			st.Layers[state.String()]++
			st.LogicalBytes += sum.Size
			if state != meta.StateDeduplicated {
				st.StoredBytes.Intact += sum.Size
			}
			if why := intactWhy(state, sum); why != "" {
				lb := st.IntactWhy[why]
				lb.Layers++
				lb.Bytes += sum.Size
				st.IntactWhy[why] = lb
			}
			st.StoredBytes.Recipes += sum.RecipeBytes
			if sum.RecipeBytes == 0 {
				return
			}
			for _, enc := range sum.Encoders {
				st.Encoders[enc]++
			}
			r, err := sc.recipe(ctx, l)
			if errors.Is(err, driver.ErrNotFound) {
				gone = append(gone, l)
				return
			}
			if err != nil {
				if ferr == nil {
					ferr = err
				}
				return
			}
			seen := make(map[digest.Digest]bool, len(r.Tar.Files))
			for _, f := range r.Tar.Files {
				if seen[f.Digest] {
					continue
				}
				seen[f.Digest] = true
				u := files[f.Digest]
				if u == nil {
					u = &fileUse{size: f.Size}
					files[f.Digest] = u
				}
				if u.layers < 2 {
					u.layers++
				}
			}
		})
		if err == nil {
			err = ferr
		}
		if err != nil {
			return nil, nil, err
		}
	}
	for _, u := range files {
		st.Files.Bytes += u.size
		if u.layers > 1 {
			st.Files.Shared++
		}
	}
	st.Files.Unique = int64(len(files))
	var err error
	if st.DeferredImages, err = sc.DeferredIntake(ctx); err != nil {
		return nil, nil, err
	}
	if err := sc.packStats(ctx, &st.Files); err != nil {
		return nil, nil, err
	}
	st.StoredBytes.Files = st.Files.StoredBytes
	st.StoredBytes.Total = st.StoredBytes.Intact + st.StoredBytes.Files + st.StoredBytes.Recipes
	if st.StoredBytes.Total > 0 {
		st.Ratio = float64(st.LogicalBytes) / float64(st.StoredBytes.Total)
	}
	if plain := st.StoredBytes.Intact + st.Files.Bytes + st.StoredBytes.Recipes; plain > 0 {
		st.FileLevelRatio = float64(st.LogicalBytes) / float64(plain)
	}
	sc.metrics.SetDedupSavedBytes(st.LogicalBytes - st.StoredBytes.Total)
	return st, gone, nil
}
