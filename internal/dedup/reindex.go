package dedup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/parallel"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/repeat"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/task"
)

// The metadata store is an index of the storage, never its only copy
// (docs/architecture.md). Every recipe names its layer's files and every
// pack carries its own index, so Reindex rebuilds from storage alone what
// serving and GC need: each recipe's layer takes its references and its
// state (deduplicated, or intact when its data is still stored), then each
// pack's files that some recipe names are located in it. The storage has an
// identity (layout.StoreID, a random id written at first use); the
// metadata records it (meta.Identity) only once it is a complete index of
// that storage, at the end of a reindex that read every recipe and pack.
// Until then GC deletes no pack and no unique file (gc.Options.
// DedupComplete), so a metadata store that is new, lost, flushed, moved
// aside as corrupt or of another storage never makes GC delete what a
// recipe names.
//
// A reindex runs online: it only adds what storage proves (references are
// idempotent per layer, a placement of a file already located is kept),
// so pushes, dedup and pulls go on beside it, and running it twice, or
// over a complete index, changes nothing. Layers with no recipe (pending,
// intact, irreproducible) are not recorded: dedup finds them again as
// their manifests are pushed or `cairn dedup run` walks them.

// ErrReindexing means a deduplicated layer cannot be rebuilt yet: its files
// are not located because the metadata is being rebuilt from storage. The
// GET is answered 503 with a Retry-After before any byte is sent.
var ErrReindexing = fmt.Errorf("%w: the dedup metadata is being rebuilt from storage; retry shortly", registry.ErrUnavailable)

// StoreID returns the storage's identity, writing a new one when there is
// none (create false: "" then). Two processes writing at once on a fresh
// store both read back the one that stayed.
func StoreID(ctx context.Context, d driver.Driver, create bool) (string, error) {
	b, err := d.GetContent(ctx, layout.StoreID)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, driver.ErrNotFound) || !create {
		if errors.Is(err, driver.ErrNotFound) {
			return "", nil
		}
		return "", fmt.Errorf("dedup: store id: %w", err)
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("dedup: store id: %w", err)
	}
	if err := d.PutContent(ctx, layout.StoreID, []byte(hex.EncodeToString(r[:])+"\n")); err != nil {
		return "", fmt.Errorf("dedup: store id: %w", err)
	}
	return StoreID(ctx, d, false)
}

// IndexState is how a metadata store stands against the storage.
type IndexState struct {
	StoreID string // the storage's ("" : none written yet)
	MetaID  string // the one the metadata records ("" : none)
}

// Complete reports whether the metadata is a complete index of the storage.
func (s IndexState) Complete() bool { return s.MetaID != "" && s.MetaID == s.StoreID }

// Foreign reports whether the metadata indexes another storage: it records
// an identity this storage does not have, another one's or one where this
// storage has none (dedup never ran here: the configuration points the
// metadata, or the storage, somewhere new). Taking it over would keep the
// other storage's references and locations and lose its claim to them.
func (s IndexState) Foreign() bool { return s.MetaID != "" && s.MetaID != s.StoreID }

// ForeignError is why a command leaves a Foreign metadata store alone.
func (s IndexState) ForeignError() error {
	this := "none"
	if s.StoreID != "" {
		this = s.StoreID
	}
	return fmt.Errorf("the dedup metadata store indexes another storage (its id %s; this storage's %s)", s.MetaID, this)
}

// CheckIndex compares the metadata's identity with the storage's: one read
// of each, nothing written.
func CheckIndex(ctx context.Context, d driver.Driver, id meta.Identity) (IndexState, error) {
	sid, err := StoreID(ctx, d, false)
	if err != nil {
		return IndexState{}, err
	}
	mid, err := id.StoreID(ctx)
	if err != nil {
		return IndexState{}, fmt.Errorf("dedup: metadata store id: %w", err)
	}
	return IndexState{StoreID: sid, MetaID: mid}, nil
}

// ReindexStore is what Reindex needs of the metadata store (a meta.Store
// has it): its identity, the layers' references and states, and the pack
// locations it adopts from packs' own indexes.
type ReindexStore interface {
	meta.Identity
	pack.AdoptIndex
	AddLayerRefs(ctx context.Context, layer digest.Digest, files []digest.Digest) ([]meta.FileRef, error)
	ReleaseLayerRefs(ctx context.Context, layer digest.Digest) ([]digest.Digest, error)
	GetLayer(ctx context.Context, layer digest.Digest) ([]byte, meta.LayerState, error)
	PutLayer(ctx context.Context, layer digest.Digest, summary []byte, state meta.LayerState) error
	SetLayerState(ctx context.Context, layer digest.Digest, state meta.LayerState) error
}

// ReindexOptions tunes Reindex.
type ReindexOptions struct {
	// Workers read recipes and pack indexes at once (default 16: on an
	// object store each is a request of tens of milliseconds).
	Workers int
	// Progress, when set, is called every ProgressInterval (default 10s)
	// and at the end.
	Progress         func(ReindexStats)
	ProgressInterval time.Duration
}

// ReindexStats is what a reindex found and recorded.
type ReindexStats struct {
	Phase   string `json:"phase"`   // "recipes", "packs", "done"
	Recipes int64  `json:"recipes"` // recipe files read
	// Deduplicated and Intact count the layers recorded in each state
	// (Intact: the recipe and the data are both stored).
	Deduplicated int64 `json:"deduplicated"`
	Intact       int64 `json:"intact"`
	// Known counts recipes whose layer the metadata already recorded.
	Known int64 `json:"known"`
	// Packs is the pack objects read; PackFiles their index entries;
	// Placed the files located in them, PlacedBytes their stored bytes.
	Packs       int64 `json:"packs"`
	PackFiles   int64 `json:"pack_files"`
	Placed      int64 `json:"placed"`
	PlacedBytes int64 `json:"placed_bytes"`
	// Damaged counts recipes and packs that do not parse: they are
	// reported and skipped (scrub tells more). Errors counts those that
	// could not be read; with any, the index is not marked complete.
	// Examples holds a few of either.
	Damaged  int64    `json:"damaged"`
	Errors   int64    `json:"errors"`
	Examples []string `json:"examples,omitempty"`
	Seconds  float64  `json:"seconds"`
	// Complete: the metadata now records the storage's id.
	Complete bool `json:"complete"`
}

// reindexer is one Reindex run.
type reindexer struct {
	d     driver.Driver
	store ReindexStore
	opts  ReindexOptions

	recipes, dedupd, intact, known       atomic.Int64
	packs, packFiles, placed, placedByts atomic.Int64
	phase                                atomic.Value
	mu                                   sync.Mutex
	errs, damaged                        int64
	examples                             []string
}

// Reindex rebuilds the metadata's file references, layer states and pack
// locations from the storage's recipes and pack indexes (the comment above
// tells how and why). It clears the metadata's identity first and records
// the storage's at the end, only if every recipe and pack was read.
func Reindex(ctx context.Context, d driver.Driver, store ReindexStore, opts ReindexOptions) (*ReindexStats, error) {
	if opts.Workers <= 0 {
		opts.Workers = 16
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = 10 * time.Second
	}
	start := time.Now()
	r := &reindexer{d: d, store: store, opts: opts}
	r.phase.Store("recipes")
	if opts.Progress != nil {
		stop := repeat.Report(opts.ProgressInterval, opts.Progress, func() ReindexStats { return r.stats(start) })
		defer stop()
	}
	id, err := StoreID(ctx, d, true)
	if err != nil {
		return nil, err
	}
	if err := store.SetStoreID(ctx, ""); err != nil {
		return nil, fmt.Errorf("dedup: reindex: %w", err)
	}
	// References first: a pack's files are located only once a recipe
	// references them.
	if err := r.walkRecipes(ctx); err != nil {
		st := r.stats(start)
		return &st, err
	}
	r.phase.Store("packs")
	if err := r.walkPacks(ctx); err != nil {
		st := r.stats(start)
		return &st, err
	}
	r.phase.Store("done")
	st := r.stats(start)
	if st.Errors == 0 {
		if err := store.SetStoreID(ctx, id); err != nil {
			return &st, fmt.Errorf("dedup: reindex: %w", err)
		}
		st.Complete = true
	}
	return &st, nil
}

func (r *reindexer) stats(start time.Time) ReindexStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ReindexStats{
		Phase: r.phase.Load().(string), Recipes: r.recipes.Load(),
		Deduplicated: r.dedupd.Load(), Intact: r.intact.Load(), Known: r.known.Load(),
		Packs: r.packs.Load(), PackFiles: r.packFiles.Load(), Placed: r.placed.Load(), PlacedBytes: r.placedByts.Load(),
		Damaged: r.damaged, Errors: r.errs, Examples: append([]string(nil), r.examples...), Seconds: time.Since(start).Seconds(),
	}
}

// fail records an object that could not be read, or is damaged: a damaged
// one leaves nothing to index that a later run could read, so it does not
// keep the index incomplete (GC keeps an unrecorded pack it cannot read).
func (r *reindexer) fail(ctx context.Context, what string, err error, damaged bool) {
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if damaged {
		r.damaged++
	} else {
		r.errs++
	}
	if len(r.examples) < 5 {
		r.examples = append(r.examples, what+": "+err.Error())
	}
}

// recipeJob is one recipe found by the listing, and whether the blob's
// data file is stored beside it.
type recipeJob struct {
	layer  digest.Digest
	intact bool
}

// walkRecipes lists blobs/ once and records the layer of every recipe.
// A blob's data sorts before its recipe in the listing, so the listing
// alone tells whether the intact copy is still stored.
func (r *reindexer) walkRecipes(ctx context.Context) error {
	p := parallel.StartPool(r.opts.Workers, func(j recipeJob) { r.recipe(ctx, j) })
	var lastData string
	err := r.d.Walk(ctx, layout.BlobsDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		alg, hexs, leaf, ok := layout.ParseBlobPath(fi.Path)
		if !ok {
			return nil
		}
		if leaf == layout.BlobDataLeaf {
			lastData = hexs
			return nil
		}
		l := digest.NewDigestFromEncoded(digest.Algorithm(alg), hexs)
		if l.Validate() != nil {
			return nil
		}
		return p.Send(ctx, recipeJob{layer: l, intact: lastData == hexs})
	})
	p.Wait()
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("dedup: reindex: listing blobs: %w", err)
	}
	return ctx.Err()
}

// recipe records one recipe's layer: its references, and its state unless
// the metadata knows it already.
func (r *reindexer) recipe(ctx context.Context, j recipeJob) {
	if ctx.Err() != nil {
		return
	}
	b, err := r.d.GetContent(ctx, layout.BlobRecipe(j.layer))
	if errors.Is(err, driver.ErrNotFound) {
		return // GC deleted the blob since the listing
	}
	if err != nil {
		r.fail(ctx, "recipe "+string(j.layer), err, false)
		return
	}
	rec, err := decodeRecipe(j.layer, b)
	if err != nil {
		r.fail(ctx, "recipe "+string(j.layer), err, true)
		return
	}
	r.recipes.Add(1)
	files := distinctFiles(&rec.Tar)
	if len(files) > 0 {
		_, err = r.store.AddLayerRefs(ctx, j.layer, files)
		if errors.Is(err, meta.ErrLayerFilesDiffer) {
			// The metadata holds another set for this layer (an attempt
			// the recipe replaced): the recipe is the truth.
			if _, err = r.store.ReleaseLayerRefs(ctx, j.layer); err == nil {
				_, err = r.store.AddLayerRefs(ctx, j.layer, files)
			}
		}
		if err != nil {
			r.fail(ctx, "references of "+string(j.layer), err, false)
			return
		}
	}
	_, state, err := r.store.GetLayer(ctx, j.layer)
	switch {
	case err == nil && state == meta.StateDeduplicated && j.intact:
		// Its intact copy is stored again (a re-push before cairn linked
		// a deduplicated blob instead): counted as intact, so that the
		// worker's scan drops it again in its mode.
		if err := r.store.SetLayerState(ctx, j.layer, meta.StateIntact); err != nil {
			r.fail(ctx, "layer "+string(j.layer), err, false)
			return
		}
		r.known.Add(1)
		return
	case err == nil && (state == meta.StateDeduplicated || state == meta.StateIntact):
		r.known.Add(1)
		return
	case err != nil && !errors.Is(err, meta.ErrNotFound):
		r.fail(ctx, "layer "+string(j.layer), err, false)
		return
	}
	// A recipe file is written only once verified, so it is trusted as the
	// worker trusts it. The weakest mode that explains what is stored:
	// a later pass in the configured mode raises it.
	sum := summaryOf(rec, int64(len(b)))
	state = meta.StateDeduplicated
	sum.Mode = ModeFull
	if j.intact {
		state, sum.Mode = meta.StateIntact, ModeIndex
	}
	sb, err := json.Marshal(sum)
	if err == nil {
		err = r.store.PutLayer(ctx, j.layer, sb, state)
	}
	if err != nil {
		r.fail(ctx, "layer "+string(j.layer), err, false)
		return
	}
	if j.intact {
		r.intact.Add(1)
	} else {
		r.dedupd.Add(1)
	}
}

// walkPacks lists cairn/packs once and locates in each pack the files its
// index lists that recipes reference and nothing locates yet.
func (r *reindexer) walkPacks(ctx context.Context) error {
	type packJob struct {
		id   string
		size int64
	}
	p := parallel.StartPool(r.opts.Workers, func(j packJob) {
		if ctx.Err() != nil {
			return
		}
		a, err := pack.Adopt(ctx, r.d, r.store, j.id, j.size)
		r.packs.Add(1)
		r.packFiles.Add(int64(a.Entries))
		r.placed.Add(int64(a.Placed))
		r.placedByts.Add(a.PlacedBytes)
		if errors.Is(err, meta.ErrPackGone) || errors.Is(err, driver.ErrNotFound) {
			return // GC is deleting it: none of its files is live
		}
		if err != nil {
			r.fail(ctx, "pack "+j.id, err, errors.Is(err, pack.ErrFormat))
		}
	})
	err := r.d.Walk(ctx, layout.PacksDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		id, ok := layout.ParsePackPath(fi.Path)
		if !ok {
			return nil
		}
		return p.Send(ctx, packJob{id: id, size: fi.Size})
	})
	p.Wait()
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("dedup: reindex: listing packs: %w", err)
	}
	return ctx.Err()
}

// summaryOf describes a layer from its recipe, whose file is recipeBytes
// long.
func summaryOf(r *Recipe, recipeBytes int64) summary {
	return summary{
		Size: r.Size, TarSize: r.Tar.TarSize, RecipeBytes: recipeBytes,
		Files: len(distinctFiles(&r.Tar)), Encoders: encoders(r.Compression),
	}
}

// indexCheckInterval is how often serve checks that the metadata still
// indexes the storage: a Redis flushed, or restarted without persistence,
// loses it while cairn runs.
const indexCheckInterval = time.Minute

// reindexLease keeps nodes sharing a metadata store from rebuilding it at
// the same time (which would be safe, merely wasteful).
const reindexLease = "dedup:reindex"

// EnsureIndexed makes the metadata a complete index of the storage: when
// its identity is not the storage's, it is rebuilt from storage (Reindex,
// under a lease the nodes share; while it runs, a GET of a layer whose
// files are not located yet is refused with ErrReindexing). A metadata
// store that indexes another storage is left alone and reported: its
// owner must be sure before `cairn dedup reindex --force` takes it over.
// It returns the reindex's stats, or nil when none ran.
func (e *Engine) EnsureIndexed(ctx context.Context, opts ReindexOptions) (*ReindexStats, error) {
	if e.store == nil {
		return nil, nil
	}
	st, err := CheckIndex(ctx, e.d, e.store)
	if err != nil || st.Complete() {
		return nil, err
	}
	if st.Foreign() {
		return nil, fmt.Errorf("dedup: %w: GC keeps every pack and file until it is reindexed (cairn dedup reindex --force)", st.ForeignError())
	}
	if !e.reindexing.CompareAndSwap(false, true) {
		return nil, nil // this node is rebuilding it already
	}
	defer e.reindexing.Store(false)
	var rs *ReindexStats
	_, err = e.Worker.withLease(ctx, reindexLease, func(ctx context.Context) error {
		if st.StoreID == "" {
			// Dedup's first start on this storage: nothing was lost.
			e.log.Info("dedup: recording this storage's identity in the metadata store")
		} else {
			e.log.Warn("dedup: the metadata is not a complete index of this storage (new, lost, flushed or set aside as corrupt): rebuilding it from recipes and packs", "metadata_id", st.MetaID, "storage_id", st.StoreID)
		}
		var err error
		rs, err = Reindex(ctx, e.d, e.store, opts)
		return err
	})
	if rs != nil {
		e.log.Info("dedup: metadata rebuilt from storage", "complete", rs.Complete, "recipes", rs.Recipes,
			"deduplicated", rs.Deduplicated, "intact", rs.Intact, "known", rs.Known, "packs", rs.Packs,
			"files_located", rs.Placed, "damaged", rs.Damaged, "errors", rs.Errors, "seconds", rs.Seconds)
	}
	return rs, err
}

// keepIndexed is EnsureIndexed as serve's periodic task.
func (e *Engine) keepIndexed(ctx context.Context) error {
	_, err := e.EnsureIndexed(ctx, ReindexOptions{})
	return err
}

// indexIncomplete checks the metadata against the storage for a restore
// that found files located nowhere: when it is not a complete index, a
// rebuild is queued (one at a time) and it reports true.
func (e *Engine) indexIncomplete(ctx context.Context) bool {
	st, err := CheckIndex(ctx, e.d, e.store)
	if err != nil || st.Complete() {
		return err != nil
	}
	if e.Worker.runner != nil && e.reindexQueued.CompareAndSwap(false, true) {
		e.Worker.runner.Submit("dedup index", task.High, func(ctx context.Context) error {
			defer e.reindexQueued.Store(false)
			return e.keepIndexed(ctx)
		})
	}
	return true
}
