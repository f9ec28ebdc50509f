package dedup

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-registry/cairn/internal/dedup/cache"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/parallel"
	"github.com/cairn-registry/cairn/internal/repeat"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/task"
)

// Metrics receives what the engine does (metrics.Metrics implements it).
type Metrics interface {
	SetDedupSavedBytes(n int64)
	CacheLookup(cache string, hit bool)
	DedupPredicted(cache string)
	DedupProcessed(outcome string)
	// DedupRebuildFailed counts a rebuild of a deduplicated layer, for a
	// pull, a predicted pull or a promotion, that failed (restore.go).
	DedupRebuildFailed(reason string)
}

// CacheMetrics is what a Metrics adds to count caches stepping aside
// (metrics.Metrics has it); apart from Metrics so that a Metrics without
// it still serves, uncounted.
type CacheMetrics interface {
	// DedupCacheWriteFailed counts a layer that cache streamed without
	// keeping its copy, by reason (cache.Reason*).
	DedupCacheWriteFailed(cache, reason string)
}

// cacheFailures is how a cache's step-asides reach the operator: counted,
// and logged once per layer; at WARN, not ERROR, since the pull got every
// byte. A decline (the volume's free margin) is the cache working as
// bounded, so only at DEBUG.
func cacheFailures(log *slog.Logger, m Metrics, name string) func(cache.WriteFailure) {
	cm, _ := m.(CacheMetrics)
	return func(f cache.WriteFailure) {
		if cm != nil {
			cm.DedupCacheWriteFailed(name, f.Reason)
		}
		if f.Err == nil {
			log.Debug("dedup: cache declined a layer to keep its volume's free margin; it streams without a cached copy", "cache", name, "layer", f.Key)
			return
		}
		log.Warn("dedup: cache write failed; the layer streams on without a cached copy", "cache", name, "layer", f.Key, "reason", f.Reason, "err", f.Err)
	}
}

// Cache names, as metrics label them.
const (
	CachePreconstruct = "preconstruct"
	CachePrefetch     = "prefetch"
)

// scanInterval is how often the worker looks for layers left pending (a
// full queue, a restart) and for selective-mode layers to drop; every
// statsEvery scans it recomputes the statistics behind the saved-bytes
// gauge (that reads every recipe, so not more often).
const (
	scanInterval = time.Minute
	statsEvery   = 60
)

// Engine is dedup's parts wired together, each with one job and only the
// store methods it uses:
//   - Source serves deduplicated layers by rebuilding them (restore.go);
//     it needs storage only.
//   - Worker deduplicates pushed layers in the background: intake, layer
//     processing, the periodic scan, `cairn dedup run` (engine.go,
//     process.go).
//   - Predictor records pulls and warms caches ahead of predicted ones
//     (predict.go).
//   - Statistics reports what dedup saves (stats.go).
//
// Without a metadata store only the Source works.
type Engine struct {
	*Source
	*Worker
	*Predictor
	*Statistics

	stop  func()   // ends the Runner Start made
	store Metadata // nil without a metadata store
	// reindexQueued: a rebuild of the index is queued or running on the
	// Runner (indexIncomplete).
	reindexQueued atomic.Bool
}

// Source serves blobs whose intact copy dedup removed (registry.DedupSource).
type Source struct {
	d       driver.Driver
	files   *pack.Store
	log     *slog.Logger
	metrics Metrics
	disk    *cache.Disk
	mem     *cache.Memory
	recipes *recipeCache
	// reindexing is set while the metadata is rebuilt from storage: a
	// layer whose files are not located yet is refused before its
	// headers (ErrReindexing) rather than cut mid-stream.
	reindexing atomic.Bool
	// checkIndex, when set (Schedule), checks the metadata against the
	// storage after a restore found files located nowhere; it reports
	// whether the index is incomplete (a rebuild is then under way).
	checkIndex func(ctx context.Context) bool
	// keepOriginal makes the worker's check keep the original stream's
	// block headers and spans in recipes (recompress.Parses.KeepHeaders,
	// KeepSpans): with Options.Parses.
	keepOriginal bool
	// states, when set, tells which layers are deduplicated (Rebuilt).
	states layerStates
}

// layerStates is what tells a layer's state.
type layerStates interface {
	GetLayer(ctx context.Context, layer digest.Digest) ([]byte, meta.LayerState, error)
}

// Metadata is what an Engine uses of the metadata store (a meta.Store has
// it): the interfaces of its parts together, workerStore, predictorStore,
// packLister (Statistics), ReindexStore (EnsureIndexed) and pack.Index (the
// pack store). GC's side of the store (Bulk, tombstones, pack deletion),
// the counters and Close are not in it: they stay with whoever opened the
// store.
type Metadata interface {
	workerStore
	predictorStore
	packLister
	ReindexStore
	pack.Index
}

// summaryStore is what reads and writes layers' summaries and states.
type summaryStore interface {
	GetLayer(ctx context.Context, layer digest.Digest) ([]byte, meta.LayerState, error)
	PutLayer(ctx context.Context, layer digest.Digest, recipe []byte, state meta.LayerState) error
	ListLayers(ctx context.Context, state meta.LayerState, after digest.Digest, limit int) ([]digest.Digest, error)
}

// summaries reads and writes layers' summaries and states.
type summaries struct{ meta summaryStore }

// layerRefs is what processing a layer needs of the file index: the
// layer's references on its files and their state (process.go).
type layerRefs interface {
	AddLayerRefs(ctx context.Context, layer digest.Digest, files []digest.Digest) ([]meta.FileRef, error)
	ReleaseLayerRefs(ctx context.Context, layer digest.Digest) ([]digest.Digest, error)
	LayerFiles(ctx context.Context, layer digest.Digest) ([]digest.Digest, error)
	Files(ctx context.Context, digests []digest.Digest) ([]meta.FileInfo, error)
	DeleteLayer(ctx context.Context, layer digest.Digest) error
}

// workerStore is what the Worker needs of the metadata store: layer
// summaries, the file references, the image map (intake), layer
// popularity (selective mode) and leases (one node per layer).
type workerStore interface {
	summaryStore
	layerRefs
	meta.Leases
	SetImageLayers(ctx context.Context, manifest digest.Digest, layers []digest.Digest) error
	LayerPulls(ctx context.Context, layer digest.Digest, since time.Time) (int64, error)
}

// Worker deduplicates layers in the background (see process for a
// layer's lifecycle).
type Worker struct {
	*Source
	summaries
	meta       workerStore // nil without a metadata store
	opts       Options
	statistics *Statistics
	runner     *task.Runner // set by Schedule
	mu         sync.Mutex
	queued     map[digest.Digest]bool
	// running holds the layers a job is processing, and the job to run
	// after it when another came meanwhile (nil: none): two jobs on one
	// layer at once could record it intact while the other drops its data.
	running map[digest.Digest]*job
	scans   atomic.Int64
	// deferred is set once this node stored an image's intake for later
	// (intake.go), so that it retries soon.
	deferred atomic.Bool
	// recovered runs when deferred intake went through: the metadata
	// store is back (Schedule sets it to the index check).
	recovered func(ctx context.Context) error
	// holder names this engine in layer leases, so that nodes sharing a
	// metadata store do not process one layer at the same time.
	holder string
	// writers are the files this process's layers are writing (process.go).
	writers fileWriters
}

// predictorStore is what the Predictor needs of the metadata store.
type predictorStore interface {
	summaryStore
	RecordPull(ctx context.Context, client string, layer digest.Digest, now time.Time) (int64, error)
	ClientLayers(ctx context.Context, client string) ([]meta.LayerPull, error)
	RepullRatio(ctx context.Context, client string) (float64, error)
}

// Predictor records what clients pull and warms the caches for the layers
// a client is about to pull.
type Predictor struct {
	*Source
	summaries
	meta    predictorStore // nil without a metadata store
	opts    Options
	runner  *task.Runner
	clients *clientLayers
	// warming bounds prefetch fills running at once.
	warming chan struct{}
	// pulled tells the Worker of a recorded pull (selective promotion).
	pulled func(ctx context.Context, l digest.Digest)
}

// Statistics computes what dedup stores and saves.
type Statistics struct {
	*Source
	summaries
	packs packLister
}

// packLister pages through the pack records.
type packLister interface {
	ListPacks(ctx context.Context, after string, limit int) ([]meta.PackInfo, error)
}

type job struct {
	layer   digest.Digest
	mode    Mode
	recheck bool // look for the recipe file in storage (see process)
}

// NewSource returns a Source alone, reading files through files: for
// tools that only rebuild layers (cairn scrub), with whatever metadata
// store files was given to locate them. It has no caches.
func NewSource(d driver.Driver, files *pack.Store, log *slog.Logger) *Source {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return newSource(d, files, log, nopMetrics{})
}

func newSource(d driver.Driver, files *pack.Store, log *slog.Logger, m Metrics) *Source {
	return &Source{d: d, files: files, log: log, metrics: m, recipes: newRecipeCache(64 << 20)}
}

// New returns an engine over d. store may be nil (restore only). Start or
// Schedule runs the background work; Close ends it.
func New(d driver.Driver, store Metadata, opts Options, log *slog.Logger, m Metrics) (*Engine, error) {
	opts = opts.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = nopMetrics{}
	}
	var idx pack.Index
	if store != nil {
		idx = store
	}
	files, err := pack.NewStore(d, idx, opts.Packs, log)
	if err != nil {
		return nil, err
	}
	src := newSource(d, files, log, m)
	src.keepOriginal = opts.Parses
	if opts.TempDir != "" {
		if err := os.MkdirAll(opts.TempDir, 0o755); err != nil {
			return nil, fmt.Errorf("dedup: spool directory: %w", err)
		}
		if store != nil {
			// The store's lock makes this the only worker: what a killed
			// one spooled is garbage.
			old, _ := filepath.Glob(filepath.Join(opts.TempDir, spoolPattern))
			for _, p := range old {
				os.Remove(p)
			}
		}
	}
	if opts.PreconstructDir != "" {
		// The cache only saves rebuilds: a directory it cannot use leaves
		// it off, and restores stream without it.
		if disk, err := cache.OpenDisk(opts.PreconstructDir, opts.PreconstructSize); err != nil {
			log.Error("dedup: preconstruct cache off: restores stream without it", "dir", opts.PreconstructDir, "err", err)
		} else {
			disk.SetPrefillLimit(opts.PredictRebuilds)
			disk.OnWriteFailure(cacheFailures(log, m, CachePreconstruct))
			src.disk = disk
		}
	}
	if _, ok := driver.As[willReader](d); ok && opts.PrefetchSize > 0 {
		log.Info("dedup: no prefetch cache on this storage: predicted intact layers are read ahead by the page cache", "storage", d.Name())
	} else if opts.PrefetchSize > 0 {
		src.mem = cache.NewMemory(opts.PrefetchSize)
	}
	var sums summaries
	w := &Worker{Source: src, opts: opts, queued: make(map[digest.Digest]bool), running: make(map[digest.Digest]*job), holder: holderID()}
	p := &Predictor{Source: src, opts: opts, clients: newClientLayers(4096), warming: make(chan struct{}, 4), pulled: w.pulled}
	if store != nil {
		sums = summaries{meta: store}
		w.meta, p.meta = store, store
		src.states = store
	}
	st := &Statistics{Source: src, summaries: sums}
	if store != nil {
		st.packs = store
	}
	w.summaries, p.summaries, w.statistics = sums, sums, st
	return &Engine{Source: src, Worker: w, Predictor: p, Statistics: st, store: store}, nil
}

// Start runs the background work on a Runner of its own (for `cairn dedup`
// and tests; serve shares its Runner through Schedule) until ctx ends or
// Close is called.
func (e *Engine) Start(ctx context.Context) {
	if e.Worker.meta == nil {
		return
	}
	r := task.New(e.Worker.opts.Workers+1, e.Worker.opts.QueueSize, e.Source.log)
	e.Schedule(r)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	e.stop = func() { cancel(); <-done }
}

// Schedule puts the engine's background work on r, as tasks: each pushed
// image's intake, each layer's processing and each pull record as queued
// tasks (pull records first: they are tiny), predicted warm-ups at low
// priority, and the Worker's periodic scan. Without a metadata store there
// is none.
func (e *Engine) Schedule(r *task.Runner) {
	if e.Worker.meta == nil {
		return
	}
	e.Worker.runner, e.Predictor.runner = r, r
	e.Worker.recovered = e.keepIndexed
	e.Source.checkIndex = e.indexIncomplete
	r.Every("dedup index", 0, indexCheckInterval, task.High, e.keepIndexed)
	r.Every("dedup scan", 0, scanInterval, task.Normal, e.Worker.scanOnce)
	// High: it is a no-op unless intake was deferred, and must not wait
	// behind the layers being processed.
	r.Every("dedup intake retry", intakeRetry, intakeRetry, task.High, e.Worker.retryIntake)
}

// Workers is how many layers the engine means to process at once; a
// shared Runner should have at least as many workers.
func (e *Engine) Workers() int { return e.Worker.opts.Workers }

// Close stops the background work of Start (a layer being processed stays
// pending and is resumed by the next start) and closes the caches.
func (e *Engine) Close() error {
	if e.stop != nil {
		e.stop()
	}
	if e.disk != nil {
		return e.disk.Close()
	}
	return nil
}

// pulled turns a hot deduplicated layer back to intact in selective mode,
// after a recorded pull.
func (w *Worker) pulled(ctx context.Context, l digest.Digest) {
	if sum, state, err := w.layerState(ctx, l); err == nil && state == meta.StateDeduplicated && sum.Mode == ModeSelective {
		if hot, err := w.hot(ctx, l); err == nil && hot {
			w.enqueue(l, ModeSelective)
		}
	}
}

// enqueue hands l to the workers unless it is already waiting; a full queue
// leaves it pending for the periodic scan.
func (w *Worker) enqueue(l digest.Digest, mode Mode) { w.enqueueJob(job{layer: l, mode: mode}) }

func (w *Worker) enqueueJob(j job) {
	if w.runner == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queued[j.layer] {
		return
	}
	if w.runner.Submit("dedup layer", task.Normal, func(ctx context.Context) error { w.runJob(ctx, j); return nil }) {
		w.queued[j.layer] = true
	}
}

// runJob processes one layer under its lease, one job per layer at a
// time: a job for a layer being processed runs after that one.
func (w *Worker) runJob(ctx context.Context, j job) {
	w.mu.Lock()
	delete(w.queued, j.layer)
	if _, busy := w.running[j.layer]; busy {
		w.running[j.layer] = &j
		w.mu.Unlock()
		return
	}
	w.running[j.layer] = nil
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		next := w.running[j.layer]
		delete(w.running, j.layer)
		w.mu.Unlock()
		if next != nil {
			w.enqueueJob(*next)
		}
	}()
	ctx, span := w.opts.Tracer.Start(ctx, "dedup.layer", trace.WithAttributes(
		attribute.String("cairn.layer", j.layer.String()), attribute.String("cairn.dedup.mode", string(j.mode))))
	defer span.End()
	start := time.Now()
	out, err := w.leased(ctx, j.layer, func(ctx context.Context) (outcome, error) {
		return w.process(ctx, j.layer, j.mode, j.recheck)
	})
	span.SetAttributes(attribute.String("cairn.dedup.outcome", string(out)))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		if ctx.Err() == nil {
			w.log.Warn("dedup: layer failed, stays pending", "layer", j.layer, "err", err)
			w.metrics.DedupProcessed("error")
		}
		return
	}
	w.metrics.DedupProcessed(string(out))
	if out == outDeduplicated && w.opts.Events != nil {
		w.opts.Events.LayerDeduplicated(j.layer)
	}
	w.log.Debug("dedup: layer processed", "layer", j.layer, "outcome", out, "duration", time.Since(start))
}

// intakeJob is a pushed image manifest's layers.
type intakeJob struct {
	manifest digest.Digest
	layers   []digest.Digest
	mode     Mode
	// sizes are the layers' sizes as the manifest gives them, so that
	// stats count a pending layer's intact bytes before it is processed
	// (a deferred intake does not keep them).
	sizes map[digest.Digest]int64
}

// ManifestPushed implements registry.Observer: it records the image's
// layers (ILmap) and queues them for dedup, without blocking the push.
func (w *Worker) ManifestPushed(_ context.Context, repo string, m *manifest.Manifest) {
	if w.meta == nil || w.runner == nil {
		return
	}
	layers, ok := imageLayers(m)
	if !ok {
		return
	}
	j := newIntakeJob(m, layers, w.opts.ModeFor(repo))
	ok = w.runner.Submit("dedup intake", task.Normal, func(ctx context.Context) error {
		if err := w.admit(ctx, j); err != nil && ctx.Err() == nil {
			w.deferIntake(ctx, j, err)
		}
		return nil
	})
	if !ok {
		go w.deferIntake(context.Background(), j, errors.New("the intake queue is full"))
	}
}

// newIntakeJob is the intake of image m's layers in mode.
func newIntakeJob(m *manifest.Manifest, layers []digest.Digest, mode Mode) intakeJob {
	j := intakeJob{manifest: m.Digest, layers: layers, mode: mode, sizes: make(map[digest.Digest]int64, len(layers))}
	for _, l := range m.Layers {
		j.sizes[l.Digest] = l.Size
	}
	return j
}

// admit records an image's layers and marks new ones pending before
// queueing them, so a restart or a full queue does not lose them.
func (w *Worker) admit(ctx context.Context, j intakeJob) error {
	if err := w.meta.SetImageLayers(ctx, j.manifest, j.layers); err != nil {
		return err
	}
	if j.mode == ModeOff {
		return nil
	}
	for _, l := range j.layers {
		sum, state, err := w.layerState(ctx, l)
		if err != nil {
			return err
		}
		if state == meta.StateIrreproducible || (state != 0 && sum.Mode.rank() >= j.mode.rank()) {
			continue
		}
		if state == 0 {
			sum.Mode, sum.Size = j.mode, max(j.sizes[l], 0)
			if err := w.putState(ctx, l, sum, meta.StatePending); err != nil {
				return err
			}
		}
		w.enqueue(l, j.mode)
	}
	return nil
}

// scanOnce re-queues pending layers and, in selective mode, settles layers
// whose popularity changed; every statsEvery scans it also recomputes the
// statistics and releases what layers whose blob GC deleted still hold.
func (w *Worker) scanOnce(ctx context.Context) error {
	n := w.scans.Add(1) - 1
	if err := w.drainIntake(ctx); err != nil {
		w.log.Warn("dedup: deferred intake stays deferred", "err", err)
	}
	if err := w.scan(ctx); err != nil {
		return fmt.Errorf("dedup: scan: %w", err)
	}
	if n%statsEvery == 0 {
		_, gone, err := w.statistics.stats(ctx)
		if err != nil {
			return fmt.Errorf("dedup: stats: %w", err)
		}
		for _, l := range gone {
			// process releases what a deleted blob held.
			w.enqueueJob(job{layer: l, mode: ModeIndex, recheck: true})
		}
	}
	return nil
}

func (w *Worker) scan(ctx context.Context) error {
	for _, st := range []meta.LayerState{meta.StatePending, meta.StateIntact, meta.StateDeduplicated} {
		err := w.eachLayer(ctx, st, func(l digest.Digest, sum summary) {
			switch {
			case st == meta.StatePending,
				sum.Revived,
				sum.Mode == ModeSelective,
				st == meta.StateIntact && sum.Mode == ModeFull:
				w.enqueue(l, sum.Mode)
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// eachLayer calls fn for every layer in state, paging through the store.
func (s summaries) eachLayer(ctx context.Context, state meta.LayerState, fn func(digest.Digest, summary)) error {
	var after digest.Digest
	for {
		page, err := s.meta.ListLayers(ctx, state, after, 500)
		if err != nil || len(page) == 0 {
			return err
		}
		for _, l := range page {
			sum, st, err := s.layerState(ctx, l)
			if err != nil {
				return err
			}
			if st == state {
				fn(l, sum)
			}
		}
		after = page[len(page)-1]
	}
}

// Dedupable layer media types: uncompressed, gzip and zstd tars, OCI and
// Docker. Foreign and non-distributable layers are not stored by cairn.
var layerTypes = map[string]bool{
	"application/vnd.oci.image.layer.v1.tar":            true,
	"application/vnd.oci.image.layer.v1.tar+gzip":       true,
	"application/vnd.oci.image.layer.v1.tar+zstd":       true,
	"application/vnd.docker.image.rootfs.diff.tar":      true,
	"application/vnd.docker.image.rootfs.diff.tar.gzip": true,
	"application/vnd.docker.image.rootfs.diff.tar.zstd": true,
}

// imageLayers returns the dedupable layers an image manifest names; ok is
// false for anything else (indexes, artifacts without such layers).
func imageLayers(m *manifest.Manifest) ([]digest.Digest, bool) {
	var out []digest.Digest
	for _, l := range m.Layers {
		if layerTypes[l.MediaType] && l.Digest.Validate() == nil {
			out = append(out, l.Digest)
		}
	}
	return out, len(out) > 0
}

// RunStats counts what RunAll did.
type RunStats struct {
	Manifests int            `json:"manifests"`
	Layers    int            `json:"layers"`
	Outcomes  map[string]int `json:"outcomes"`
	Errors    int            `json:"errors"`
}

// RunOptions tune RunAll.
type RunOptions struct {
	// Force processes every layer in this mode ("": each repository's).
	Force Mode
	// Progress, when set, is called about every ProgressInterval (default
	// 10 s) while the run lasts, and once at its end (Final).
	Progress         func(RunProgress)
	ProgressInterval time.Duration
}

// RunProgress is a snapshot of RunAll: the manifests read so far, the
// layers they name that are to be processed, and how many are done.
type RunProgress struct {
	Manifests int
	Layers    int
	Done      int
	Errors    int
	Elapsed   time.Duration
	Final     bool
}

// RunAll processes every layer named by a manifest stored in any
// repository, in each repository's mode (forced to opts.Force when not
// ""), with the configured number of workers. It is `cairn dedup run`.
func (w *Worker) RunAll(ctx context.Context, opts RunOptions) (*RunStats, error) {
	if w.meta == nil {
		return nil, errors.New("dedup: no metadata store")
	}
	modes := make(map[digest.Digest]Mode)
	var order []digest.Digest
	st := &RunStats{Outcomes: make(map[string]int)}
	var mu sync.Mutex // guards st and toDo once the workers run
	toDo := 0
	if opts.Progress != nil {
		start := time.Now()
		report := func(final bool) {
			mu.Lock()
			p := RunProgress{Manifests: st.Manifests, Layers: toDo, Done: st.Layers, Errors: st.Errors, Elapsed: time.Since(start), Final: final}
			mu.Unlock()
			opts.Progress(p)
		}
		stop := repeat.Every(cmp.Or(opts.ProgressInterval, 10*time.Second), func() { report(false) })
		defer func() { stop(); report(true) }()
	}
	err := w.d.Walk(ctx, layout.RepositoriesDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		re := layout.ParseRepoPath(fi.Path)
		if re.Kind != layout.EntryRevisionLink {
			return nil
		}
		md := digest.NewDigestFromEncoded(digest.Algorithm(re.Alg), re.Hex)
		if md.Validate() != nil {
			return nil
		}
		content, err := w.d.GetContent(ctx, layout.BlobData(md))
		if errors.Is(err, driver.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		m, err := manifest.Parse(md, content)
		if err != nil {
			return nil
		}
		layers, ok := imageLayers(m)
		if !ok {
			return nil
		}
		if err := w.meta.SetImageLayers(ctx, md, layers); err != nil {
			return err
		}
		mode := opts.Force
		if mode == "" {
			mode = w.opts.ModeFor(re.Repo)
		}
		mu.Lock()
		defer mu.Unlock()
		st.Manifests++
		for _, l := range layers {
			if _, seen := modes[l]; !seen {
				order = append(order, l)
			}
			if mode.rank() >= modes[l].rank() {
				if modes[l].rank() == 0 && mode.rank() > 0 {
					toDo++ // a layer to process, counted once
				}
				modes[l] = mode
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return st, err
	}
	// A one-shot bulk run, not tasks: the task Runner serves until its
	// context ends, while this ends when the list does.
	parallel.For(ctx, len(order), w.opts.Workers, func(i int) {
		l := order[i]
		if modes[l] == ModeOff {
			return
		}
		out, err := w.leased(ctx, l, func(ctx context.Context) (outcome, error) {
			return w.process(ctx, l, modes[l], true)
		})
		mu.Lock()
		defer mu.Unlock()
		st.Layers++
		if err != nil {
			st.Errors++
			w.log.Warn("dedup: layer failed", "layer", l, "err", err)
		} else {
			st.Outcomes[string(out)]++
		}
	})
	return st, ctx.Err()
}

// leaseTTL bounds how long a layer stays claimed by a node that died while
// processing it; a live node renews every third of it.
const leaseTTL = 2 * time.Minute

// leased runs fn for layer l under l's lease: another node holding it means
// l is being processed there (outBusy). The lease only saves work; fn is
// safe to run twice.
func (w *Worker) leased(ctx context.Context, l digest.Digest, fn func(context.Context) (outcome, error)) (outcome, error) {
	var out outcome
	held, err := w.withLease(ctx, "dedup:"+string(l), func(ctx context.Context) error {
		var err error
		out, err = fn(ctx)
		return err
	})
	if err == nil && !held {
		return outBusy, nil
	}
	return out, err
}

// withLease runs fn under the lease name when the store is shared (else
// at once), and reports whether it ran: false when another node holds the
// lease. A lost renewal cancels fn.
func (w *Worker) withLease(ctx context.Context, name string, fn func(context.Context) error) (bool, error) {
	if !w.opts.SharedStore {
		return true, fn(ctx)
	}
	ok, err := w.meta.TryLease(ctx, name, w.holder, leaseTTL)
	if err != nil || !ok {
		return false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := repeat.Every(leaseTTL/3, func() {
		if ok, err := w.meta.TryLease(ctx, name, w.holder, leaseTTL); err == nil && !ok {
			cancel()
		}
	})
	defer stop()
	err = fn(ctx)
	if rerr := w.meta.ReleaseLease(context.WithoutCancel(ctx), name, w.holder); rerr != nil {
		w.log.Debug("dedup: releasing lease", "lease", name, "err", rerr)
	}
	return true, err
}

// holderID names this process among the nodes sharing a metadata store.
func holderID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), rand.Text()[:8])
}

type nopMetrics struct{}

func (nopMetrics) SetDedupSavedBytes(int64)  {}
func (nopMetrics) CacheLookup(string, bool)  {}
func (nopMetrics) DedupPredicted(string)     {}
func (nopMetrics) DedupProcessed(string)     {}
func (nopMetrics) DedupRebuildFailed(string) {}
