// Package dedupbench measures cairn's file-level layer deduplication on a
// realistic dataset (internal/bench/dataset): (a) the storage ratio against
// the compressed layers, file-level alone and with zstd on unique files;
// (b) the fraction of layers reproduced; (c) restore MB/s per producer
// against the matching compressor alone on the same data and against a read
// of the intact blob, in process, under one or more GOMAXPROCS; (d) the GET
// latency of a layer intact, deduplicated and cold, and from the
// preconstruct cache; (e) the cache hit ratios under a replayed workload of
// pull-once and always-repull clients, with the access predictor off and on,
// in mode full (preconstruct cache) and mode index (prefetch cache).
//
// (a), (b), (d) and (e) run the real binary (`cairn serve --config`,
// `cairn dedup run`, `cairn dedup stats --json`, /metrics on the debug
// listener) and push with a real client. Figures are printed as measured in
// one run; nothing here asserts a speed.
package dedupbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
)

// Parts of the benchmark, for Options.Parts.
const (
	PartStorage  = "storage"  // (a) and (b)
	PartRestore  = "restore"  // (c)
	PartLatency  = "latency"  // (d)
	PartPrefetch = "prefetch" // (e)
	// PartRestarts is research, run only when asked for: how many block
	// boundaries of real compress/gzip layers restart the encoder exactly.
	PartRestarts = "restarts"
)

// AllParts lists every part in the order they run.
func AllParts() []string { return []string{PartRestore, PartStorage, PartLatency, PartPrefetch} }

// Options configures Run. Zero values take the defaults noted.
type Options struct {
	// Profile is the dataset size. Default dataset.ProfileSmall.
	Profile dataset.Profile
	// CacheDir is the deb cache. Default dataset.DefaultCacheDir().
	CacheDir string
	// WorkDir holds the built dataset (reused by later runs with the same
	// profile) and, while the run lasts, the registry's storage. Default
	// <CacheDir>/work-<profile>.
	WorkDir string
	// CairnBin is the cairn binary run for the registry parts. Required
	// unless Parts is only PartRestore.
	CairnBin string
	// Parts selects what to measure. Default AllParts().
	Parts []string
	// Parses runs the registry parts with storage.dedup.packs.parses on
	// (files stored as their own DEFLATE, restores following them).
	Parses bool
	// Repeat is how many times each restore is timed (best kept).
	// Default 3 for the small profile, 1 for the full one.
	Repeat int
	// Procs are the GOMAXPROCS values the restore figures are measured
	// under, one after the other (the setting is restored afterwards).
	// Default 1 and runtime.GOMAXPROCS(0), or only 1 on one core.
	Procs []int
	// PullOnce and Repull are the numbers of clients of each kind in the
	// workload of (e); Rounds is how many times each client comes back.
	// Defaults 6, 4 and 3.
	PullOnce, Repull, Rounds int
	// Replays is how many times (e) replays the workload per mode and
	// predictor setting, off and on in turn (default 1): its latencies
	// are also given pooled over the replays.
	Replays int
	// DelayMin and DelayMax bound the pause between a client's manifest
	// GET and its layer GETs. Defaults 50ms and 200ms.
	DelayMin, DelayMax time.Duration
	// PreconstructSize and PrefetchSize bound the caches in (e), in the
	// config's units. Defaults 2GiB and 256MiB.
	PreconstructSize, PrefetchSize string
	// Log receives progress lines; nil for none.
	Log io.Writer
}

// Result holds every figure of one run. A part that failed has its error
// in Errors and no figures.
type Result struct {
	Profile   string `json:"profile"`
	Parses    bool   `json:"parses"` // Options.Parses
	GoVersion string `json:"goVersion"`
	CPUs      int    `json:"cpus"`
	Images    int    `json:"images"`
	Layers    int    `json:"layers"`
	Debs      int    `json:"debs"`
	DebBytes  int64  `json:"debBytes"`
	// BlobBytes is the size of the distinct layer blobs (what a registry
	// without dedup stores); ImageBytes counts each image's layers
	// separately (without blob sharing).
	BlobBytes  int64 `json:"blobBytes"`
	ImageBytes int64 `json:"imageBytes"`
	// Tars and TarBytes count the distinct layer tars.
	Tars     int   `json:"tars"`
	TarBytes int64 `json:"tarBytes"`

	Storage  *StorageFigures   `json:"storage,omitempty"`
	Restore  *RestoreFigures   `json:"restore,omitempty"`
	Latency  *LatencyFigures   `json:"latency,omitempty"`
	Prefetch *PrefetchFigures  `json:"prefetch,omitempty"`
	Restarts *RestartFigures   `json:"restarts,omitempty"`
	Errors   map[string]string `json:"errors,omitempty"`
}

func withDefaults(o Options) (Options, error) {
	if o.Profile == "" {
		o.Profile = dataset.ProfileSmall
	}
	if o.CacheDir == "" {
		o.CacheDir = dataset.DefaultCacheDir()
	}
	if o.WorkDir == "" {
		o.WorkDir = filepath.Join(o.CacheDir, "work-"+string(o.Profile))
	}
	if len(o.Parts) == 0 {
		o.Parts = AllParts()
	}
	known := append(AllParts(), PartRestarts)
	for _, p := range o.Parts {
		if !slices.Contains(known, p) {
			return o, fmt.Errorf("dedupbench: unknown part %q (want %s)", p, strings.Join(known, ", "))
		}
	}
	if o.Repeat <= 0 {
		o.Repeat = 3
		if o.Profile == dataset.ProfileFull {
			o.Repeat = 1
		}
	}
	if len(o.Procs) == 0 {
		o.Procs = []int{1}
		if n := runtime.GOMAXPROCS(0); n > 1 {
			o.Procs = append(o.Procs, n)
		}
	}
	for _, n := range o.Procs {
		if n < 1 {
			return o, fmt.Errorf("dedupbench: GOMAXPROCS %d: want at least 1", n)
		}
	}
	if o.PullOnce <= 0 {
		o.PullOnce = 6
	}
	if o.Repull <= 0 {
		o.Repull = 4
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if o.Replays <= 0 {
		o.Replays = 1
	}
	if o.DelayMin <= 0 && o.DelayMax <= 0 {
		o.DelayMin, o.DelayMax = 50*time.Millisecond, 200*time.Millisecond
	}
	if o.DelayMax < o.DelayMin {
		return o, fmt.Errorf("dedupbench: delay range %s-%s is empty", o.DelayMin, o.DelayMax)
	}
	if o.PreconstructSize == "" {
		o.PreconstructSize = "2GiB"
	}
	if o.PrefetchSize == "" {
		o.PrefetchSize = "256MiB"
	}
	needsEngine := slices.ContainsFunc(o.Parts, func(p string) bool { return p != PartRestore && p != PartRestarts })
	if needsEngine && o.CairnBin == "" {
		return o, errors.New("dedupbench: no cairn binary for the registry parts")
	}
	return o, nil
}

// Run builds (or reuses) the dataset and measures the selected parts. A
// part that fails is recorded in Result.Errors and the run goes on with
// the parts that do not depend on it; the returned error is non-nil only
// when nothing could be measured (the dataset could not be built).
func Run(ctx context.Context, opts Options) (*Result, error) {
	opts, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, format+"\n", args...)
		}
	}
	ds, err := dataset.Build(ctx, dataset.Options{
		Profile: opts.Profile, CacheDir: opts.CacheDir,
		WorkDir: filepath.Join(opts.WorkDir, "dataset"), Log: opts.Log,
	})
	if err != nil {
		return nil, err
	}
	res := &Result{
		Profile: string(opts.Profile), Parses: opts.Parses, GoVersion: runtime.Version(), CPUs: runtime.GOMAXPROCS(0),
		Images: len(ds.Images), Layers: len(ds.Layers), Debs: ds.Packages, DebBytes: ds.DebBytes,
		BlobBytes: ds.LogicalBytes(),
	}
	tars := map[string]bool{}
	for _, l := range ds.Layers {
		if !tars[l.DiffID.String()] {
			tars[l.DiffID.String()] = true
			res.TarBytes += l.TarSize
		}
	}
	res.Tars = len(tars)
	for _, im := range ds.Images {
		for _, l := range im.Layers {
			res.ImageBytes += l.Size
		}
	}
	fail := func(part string, err error) {
		if res.Errors == nil {
			res.Errors = map[string]string{}
		}
		res.Errors[part] = err.Error()
		logf("%s: %v", part, err)
	}
	has := func(p string) bool { return slices.Contains(opts.Parts, p) }

	if has(PartRestarts) {
		if res.Restarts, err = measureRestarts(ctx, ds, logf); err != nil {
			fail(PartRestarts, err)
		}
	}
	if has(PartRestore) {
		if res.Restore, err = measureRestore(ctx, ds, opts.WorkDir, opts.Repeat, opts.Procs, logf); err != nil {
			fail(PartRestore, err)
		}
	}
	if !has(PartStorage) && !has(PartLatency) && !has(PartPrefetch) {
		return res, nil
	}
	reg, err := newRegistryRun(opts, ds, logf)
	if err != nil {
		fail(PartStorage, err)
		return res, nil
	}
	defer reg.cleanup()
	start := time.Now()
	intact, err := reg.pushAndTimeIntact(ctx, has(PartLatency))
	if err != nil {
		for _, p := range []string{PartStorage, PartLatency, PartPrefetch} {
			if has(p) {
				fail(p, err)
			}
		}
		return res, nil
	}
	logf("registry: %d images pushed in %s", len(ds.Images), time.Since(start).Round(time.Millisecond))
	// (e) in mode index needs the intact copies the full-mode run drops:
	// index first and replay, then deduplicate fully.
	var prefetchRuns []PrefetchRun
	prefetchOK := has(PartPrefetch)
	if prefetchOK {
		_, err := reg.dedup(ctx, modeIndex)
		if err == nil {
			prefetchRuns, err = reg.prefetchRuns(ctx, modeIndex)
		}
		if err != nil {
			fail(PartPrefetch, err)
			prefetchOK = false
		}
	}
	// Every later part needs the layers deduplicated.
	st, err := reg.dedup(ctx, modeFull)
	if err != nil {
		for _, p := range []string{PartStorage, PartLatency, PartPrefetch} {
			if has(p) && (p != PartPrefetch || prefetchOK) {
				fail(p, err)
			}
		}
		return res, nil
	}
	if has(PartStorage) {
		res.Storage = storageFigures(st, res, reg.ingestWall, reg.ingestCPU)
		if res.Storage.Apparent, res.Storage.OnDisk, err = diskUsage(reg.root); err != nil {
			fail(PartStorage, err)
		}
	}
	if has(PartLatency) {
		if res.Latency, err = reg.latency(ctx, intact); err != nil {
			fail(PartLatency, err)
		}
	}
	if prefetchOK {
		// Full first: the runs keep the order they had before index.
		full, err := reg.prefetchRuns(ctx, modeFull)
		if err != nil {
			fail(PartPrefetch, err)
		} else {
			res.Prefetch = reg.prefetchFigures(append(full, prefetchRuns...))
		}
	}
	return res, nil
}

// cleanupDir removes dir, ignoring a dir already gone.
func cleanupDir(dir string) {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}
