package dedup

import (
	"context"
	"errors"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// RepackStats counts what Repack did.
type RepackStats struct {
	Layers int   `json:"layers"` // layers with a recipe looked at
	Moved  int   `json:"moved"`  // layers that had files moved
	Files  int64 `json:"files"`  // files moved into packs
	Bytes  int64 `json:"bytes"`  // their stored bytes
	Errors int   `json:"errors"` // layers that failed (logged); a rerun resumes
}

// Repack moves the unique files that are objects of their own (stores
// deduplicated before packs) into packs, layer by layer in each layer's
// order, while the registry serves (pack.Store.Migrate tells how a
// restore in flight copes). It is `cairn dedup repack`; a rerun only
// moves what is left.
func (w *Worker) Repack(ctx context.Context) (*RepackStats, error) {
	if w.meta == nil {
		return nil, errors.New("dedup: no metadata store")
	}
	st := &RepackStats{}
	for _, state := range []meta.LayerState{meta.StateDeduplicated, meta.StateIntact} {
		// One page of layers at a time: memory stays flat.
		err := w.eachLayer(ctx, state, func(l digest.Digest, sum summary) {
			if sum.RecipeBytes == 0 || ctx.Err() != nil {
				return
			}
			st.Layers++
			r, err := w.recipe(ctx, l)
			if errors.Is(err, driver.ErrNotFound) {
				return // deleted meanwhile
			}
			if err == nil {
				var c pack.Compaction
				if c, err = w.files.Migrate(ctx, r.Tar.Files); err == nil && c.Files > 0 {
					st.Moved++
					st.Files += c.Files
					st.Bytes += c.Bytes
				}
			}
			if err != nil && ctx.Err() == nil {
				st.Errors++
				w.log.Error("dedup repack: layer failed", "layer", l, "err", err)
			}
		})
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			return st, err
		}
	}
	return st, nil
}
