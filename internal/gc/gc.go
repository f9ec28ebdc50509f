// Package gc is cairn's garbage collector: it deletes what no manifest
// reaches, in bulk, with memory bounded by compact digest sets and one batch
// of paths, while the registry goes on serving.
//
// # Mark
//
// One flat listing of repositories/ yields every repository's revision
// links, tag links, tag index entries and _layers links (upload sessions
// and cairn's referrers index are skipped). For each repository the tag
// links are read, then every revision's manifest, once. A manifest is live
// when a tag reaches it, directly or through indexes, or when it refers
// (subject) to a live manifest; without delete-untagged every manifest that
// is not a referrer is live too. Referrers of a manifest that is not live go
// with it. Live manifests mark their own blob, config, layers and non-manifest
// index entries in one set of 33-byte keys. A repository whose tag links
// cannot all be read deletes nothing.
//
// # Sweep
//
// For each deleted manifest: its revision link, its referrers-index link
// and every tag index entry that names it; then the _layers links no live
// manifest of the repository names; then, from one listing of blobs/, every
// blob nobody marked. Paths are built by concatenation into one arena per
// round and handed to Driver.DeleteFiles in batches; nothing is stat'ed or
// listed before it is deleted.
//
// A blob is every file of its directory: data, the dedup recipe, or both
// (see package dedup); the blob is judged, counted and deleted as one.
//
// # Deduplicated layers
//
// With Options.Dedup, a blob whose files a round deleted releases its
// references to the unique files under cairn/files and drops its recipe
// entry; a blob the journal revived, or whose delete failed, releases
// nothing. Each file whose count reached zero is tombstoned (a file
// referenced again meanwhile is not, and stays), its object deleted in
// bulk with the others, then its entry dropped: the file lifecycle of
// package meta. A run begins by finishing what a stopped run left (every
// unreferenced file, tombstoned or not). References are released after the
// blob is deleted, never before, so a failed delete cannot leave a live
// blob with missing files; a run that dies between the two leaves the
// blob's files referenced (storage, not correctness, is lost).
//
// # Packs
//
// With Options.Packs, a file whose entry is dropped leaves its pack's live
// bytes (package meta keeps the count); after the sweep, one listing of
// cairn/packs is merged with the pack records (both in id order): a pack
// that has held no live file for the delay is tombstoned, its object
// deleted in bulk with the others, then its record; an object without a
// record older than the delay is read first: one holding referenced files
// nothing else locates is recorded and kept (pack.Adopt: its record was
// lost, or the index rebuilt without it), any other deleted; a pack whose
// live share fell below CompactBelow has its live files copied into new
// packs (Options.Compactor), emptying it for a later run. None of this needs a fence: meta refuses to place a
// file into a tombstoned pack, and a pack is empty only once nothing
// points into it; a restore that located a file in a compacted pack has
// the delay to finish, and looks again if it finds the pack gone. All of
// this, and the deletion of unique files, happens only on the word of a
// dedup index known complete for this storage (Options.DedupComplete): an
// index that is new, lost, flushed or being rebuilt does not know every
// file a recipe names, so the run keeps them all.
//
// # Running while the registry serves
//
// Package fence tells the protocol the collector shares with the
// registry's writers (run markers, journal records, round fences). The
// collector's side:
//
//  1. The marker's modification time, in the store's clock, is T0.
//     Nothing whose modification time is at or after T0 - delay is
//     deleted: not a young blob, link or tag entry, nor a blob that a young
//     link names, nor a manifest that a young tag index entry names. With
//     delay 0 this is "nothing written after the mark began".
//  2. Each sweep round that deletes revision links, _layers links or blobs
//     runs under a fence and reads the journal first. A record is settled
//     when the mark saw all of its operation's effects (the revision link
//     and every tag link, or the _layers link, modified after the record);
//     an unsettled record revives its manifest (with its children,
//     referrers and their blobs and links) and protects the blob it names.
//
// So a manifest PUT racing the sweep never ends up pointing at a deleted
// blob: its record was read by every round that deletes after its
// existence check, or its check ran after those deletions and failed
// cleanly (MANIFEST_BLOB_UNKNOWN, or a re-upload). Tag index entries and
// referrers-index links are history that no read depends on; they are
// deleted without a fence.
//
// No lock is held at any time: the mark never blocks anyone, pulls never
// wait, and a writer waits only when it arrives while a round deletes
// (one wave of DeleteFiles calls, at most fence.RoundMax). Two runs at once
// are safe, merely wasteful; scheduled runs skip their turn while another
// run's marker is fresh.
//
// Clocks: every modification time a run compares is the store's (the
// marker's, the listings'); a store that keeps them to the second (S3)
// makes "after T0" mean "in T0's second or later", which only keeps more.
// A writer bounds its wait by its own elapsed time, not by timestamps. Only
// staleness (a fence older than fence.FenceStale, a marker older than
// fence.StaleRun) compares the local clock with the store's, with margins of
// minutes.
//
// Bad entries (malformed paths or links, revisions without data, manifests
// that do not parse) are counted and reported, never fatal. A manifest
// that cannot be read because storage fails turns off the blob sweep for
// the run: what it references is unknown.
package gc

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-registry/cairn/internal/digestkey"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/repeat"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Defaults for Options.
const (
	DefaultDelay       = time.Hour
	DefaultBatchSize   = 1000
	DefaultConcurrency = 8
)

// journalTTL is how long a record that was never settled (its operation
// failed, or its process died) keeps protecting what it names.
const journalTTL = time.Hour

// Options tune a run.
type Options struct {
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
	// DeleteUntagged deletes manifests no tag reaches.
	DeleteUntagged bool
	// Delay: nothing modified less than Delay before the run began is
	// deleted. 0 keeps only what was written after the mark began.
	Delay time.Duration
	// BatchSize is the number of paths per DeleteFiles call, and of layers
	// or files per dedup index call (default 1000).
	BatchSize int
	// Concurrency bounds DeleteFiles calls in flight (default 8). Reads
	// of tag links and manifests, small and latency-bound, run with
	// 4*Concurrency in flight.
	Concurrency int
	// Progress, when set, is called about every ProgressInterval (default
	// 1s) from another goroutine, and once more at the end.
	Progress         func(Progress)
	ProgressInterval time.Duration
	// Dedup, when set, is the dedup index of the registry's deduplicated
	// layers: each blob the run deletes releases its file references and
	// recipe, and files nobody references any more are deleted (see
	// "Deduplicated layers" in the package doc).
	Dedup DedupIndex
	// Packs, when set, are the records of dedup's packs: packs with no
	// live file left for the delay are deleted, objects without a record
	// (older than the delay) too, and with a Compactor, packs whose live
	// share is below CompactBelow (default 0.5) have their live files
	// moved to new packs, about CompactBatch live bytes per call (default
	// 32 MiB), to be deleted by a run after the delay.
	Packs        PackIndex
	Compactor    Compactor
	CompactBelow float64
	CompactBatch int64
	// DedupComplete, when set, reports whether the dedup index is a
	// complete index of this storage (its identity matches, no rebuild
	// from storage is under way: package dedup's Reindex). When it is not,
	// or cannot tell, the run deletes no unique file and no pack: a file or
	// pack the index does not know may still be named by a recipe. Blobs
	// are collected as always, and their releases kept for a later run.
	// Unset: the index is trusted.
	DedupComplete func(ctx context.Context) (bool, error)
	// Forget, when set, is the registry's blob descriptor cache: after
	// each round it is told the digests of the blobs, _layers links and
	// revision links the round deleted, so that no node answers a HEAD
	// from an entry GC made false (a client would skip the upload, and
	// its manifest PUT fail). A failure is counted as a problem
	// (ProblemCacheForget), never fatal: the entries still expire.
	Forget BlobForgetter
}

// Progress is a snapshot of a run's counters.
type Progress struct {
	Phase        string // "dedup" (resuming file deletes), "mark", "sweep", "packs" or "done"
	Repositories int64
	Manifests    int64 // manifests read
	Blobs        int64 // blobs listed
	Deleted      int64 // paths deleted (or, in a dry run, to delete)
	// Planned is how many paths the sweep will delete as far as known:
	// every link once the mark is done, blobs as their listing finds them.
	Planned int64
	Elapsed time.Duration
}

// Deleted counts what a run deleted (or would delete, in a dry run).
type Deleted struct {
	Manifests       int64 `json:"manifests"`
	TagIndexEntries int64 `json:"tag_index_entries"`
	ReferrerLinks   int64 `json:"referrer_links"`
	LayerLinks      int64 `json:"layer_links"`
	Blobs           int64 `json:"blobs"`
	// BytesFreed is the listed size of the blobs' files (data and recipe)
	// and of the packs deleted (Report.Packs.BytesFreed); the bytes of
	// unique files stored one object each (before packs) are not known.
	BytesFreed int64 `json:"bytes_freed"`
	// Recipes counts the deleted blobs that were deduplicated (had a
	// recipe file); they are counted in Blobs too.
	Recipes int64 `json:"recipes"`
	// DedupFiles counts unique files deleted (their entries dropped, and
	// their objects under cairn/files where they have one); a dry run
	// counts those the real run would delete.
	DedupFiles int64 `json:"dedup_files"`
	// TmpFiles counts leftovers of interrupted writes older than the
	// delay: dedup's (cairn/tmp) and the driver's own temporary files
	// (filesystem: link~<suffix> after a kill -9).
	TmpFiles int64 `json:"tmp_files"`
}

// Report is the outcome of a run.
type Report struct {
	RunID          string    `json:"run_id,omitempty"`
	DryRun         bool      `json:"dry_run"`
	DeleteUntagged bool      `json:"delete_untagged"`
	Delay          string    `json:"delay"`
	Started        time.Time `json:"started"`
	Seconds        float64   `json:"duration_seconds"`

	Repositories int64 `json:"repositories"`
	Manifests    int64 `json:"manifests"`
	Tags         int64 `json:"tags"`
	Blobs        int64 `json:"blobs"`

	Deleted Deleted `json:"deleted"`
	// KeptYoung counts candidates kept because they were younger than the
	// delay; KeptJournal those kept because a writer's record named them.
	KeptYoung   int64 `json:"kept_young"`
	KeptJournal int64 `json:"kept_journal"`

	// DeleteFailures is how many paths DeleteFiles did not delete;
	// Deferred how many were not attempted (round time limit, or the run
	// was stopped).
	DeleteFailures int64    `json:"delete_failures"`
	Deferred       int64    `json:"deferred"`
	DeleteErrors   []string `json:"delete_errors,omitempty"`

	// BlobSweep is "done", or why blobs were not swept.
	BlobSweep string `json:"blob_sweep"`
	// Problems counts bad entries by kind; Examples holds a few paths of each.
	Problems map[string]int64    `json:"problems"`
	Examples map[string][]string `json:"problem_examples,omitempty"`
	// Requests counts storage driver calls by kind (deletefiles_paths is
	// the number of paths they carried).
	Requests map[string]int64 `json:"requests"`
	// Dedup details what happened to deduplicated files; nil without
	// Options.Dedup.
	Dedup *DedupReport `json:"dedup,omitempty"`
	// Packs details what happened to dedup's packs; nil without
	// Options.Packs.
	Packs *PackReport `json:"packs,omitempty"`
	// DedupIndex is "complete", or why unique files and packs were kept
	// (Options.DedupComplete); "" without Options.Dedup or Options.Packs.
	DedupIndex string `json:"dedup_index,omitempty"`
}

// Problem kinds in Report.Problems.
const (
	ProblemBadPath         = "bad_path"          // a digest in a path that does not parse
	ProblemBadLink         = "bad_link"          // a tag link whose content is not a digest
	ProblemUnreadableLink  = "unreadable_link"   // a tag link storage failed to return
	ProblemDanglingTag     = "dangling_tag"      // a tag naming no revision
	ProblemMissingManifest = "missing_manifest"  // a revision whose manifest blob is missing
	ProblemBadManifest     = "bad_manifest"      // a manifest that does not parse
	ProblemUnreadable      = "unreadable"        // a manifest storage failed to return
	ProblemBadReference    = "bad_reference"     // a descriptor digest that does not parse
	ProblemBadJournal      = "bad_journal_entry" // a journal record that does not parse
	ProblemJournalCleanup  = "journal_cleanup"   // removing settled journal records failed
	ProblemCacheForget     = "cache_forget"      // Options.Forget failed; its entries expire on their own
)

const maxExamples = 5

// Run collects garbage in the registry stored through d. The error is nil
// when the run completed; bad entries are in the report, not errors.
func Run(ctx context.Context, d driver.Driver, opts Options) (*Report, error) {
	c := newCollector(d, opts)
	return c.run(ctx)
}

// collector is one run's state.
type collector struct {
	d      *driver.Counting
	opts   Options
	rep    Report
	start  time.Time
	runID  string
	t0     time.Time // the marker's modification time (store clock)
	cutoff int64     // Unix ns; modified at or after it is young

	repos     []*repoState
	repoIndex map[string]int
	marked    map[dkey]struct{}
	keys      digestkey.Spellings // full hex of non-sha256 keys

	blobSweepOff string // why blobs are not swept, "" to sweep
	// keepDedup: the dedup index may be incomplete, so no unique file or
	// pack is deleted (Options.DedupComplete).
	keepDedup bool

	mu       sync.Mutex // guards rep.Problems, rep.Examples, DeleteErrors
	phase    atomic.Value
	nRepos   atomic.Int64
	nMan     atomic.Int64
	nBlobs   atomic.Int64
	nDeleted atomic.Int64
	nPlanned atomic.Int64

	journal journalState
}

func newCollector(d driver.Driver, opts Options) *collector {
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = time.Second
	}
	if opts.Delay < 0 {
		opts.Delay = 0
	}
	if opts.CompactBelow <= 0 {
		opts.CompactBelow = DefaultCompactBelow
	}
	if opts.CompactBatch <= 0 {
		opts.CompactBatch = 32 << 20
	}
	c := &collector{
		d:         driver.NewCounting(d),
		opts:      opts,
		repoIndex: make(map[string]int),
		marked:    make(map[dkey]struct{}),
	}
	c.rep = Report{
		DryRun:         opts.DryRun,
		DeleteUntagged: opts.DeleteUntagged,
		Delay:          opts.Delay.String(),
		Problems:       make(map[string]int64),
		Examples:       make(map[string][]string),
	}
	if opts.Dedup != nil {
		c.rep.Dedup = &DedupReport{}
	}
	if opts.Packs != nil {
		c.rep.Packs = &PackReport{}
	}
	c.phase.Store("mark")
	return c
}

func (c *collector) run(ctx context.Context) (rep *Report, err error) {
	c.start = time.Now()
	c.rep.Started = c.start.UTC()
	stopProgress := repeat.Report(c.opts.ProgressInterval, c.opts.Progress, c.progress)
	defer func() {
		c.phase.Store("done")
		stopProgress()
		c.rep.Seconds = time.Since(c.start).Seconds()
		c.rep.Requests = c.d.Counts()
		rep = &c.rep
	}()

	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if ferr := c.end(ctx, err == nil); err == nil {
			err = ferr
		}
	}()
	if err := c.checkDedupIndex(ctx); err != nil {
		return nil, err
	}
	if c.opts.Dedup != nil && !c.keepDedup {
		c.phase.Store("dedup")
		if err := c.drainZeroFiles(ctx); err != nil {
			return nil, err
		}
		c.phase.Store("mark")
	}
	if err := c.markAll(ctx); err != nil {
		return nil, fmt.Errorf("gc: mark: %w", err)
	}
	c.phase.Store("sweep")
	if err := c.sweep(ctx); err != nil {
		return nil, fmt.Errorf("gc: sweep: %w", err)
	}
	if c.opts.Packs != nil && !c.keepDedup {
		c.phase.Store("packs")
		if err := c.sweepPacks(ctx); err != nil {
			return nil, fmt.Errorf("gc: sweep packs: %w", err)
		}
		c.rep.Deleted.BytesFreed += c.rep.Packs.BytesFreed
	}
	if err := c.sweepTmp(ctx); err != nil {
		return nil, fmt.Errorf("gc: sweep %s: %w", layout.TmpDir, err)
	}
	if err := c.sweepTemp(ctx); err != nil {
		return nil, fmt.Errorf("gc: sweep temporary files: %w", err)
	}
	return nil, nil
}

// young reports whether a modification time (Unix ns; 0 when unknown) is
// within the delay, or after the run began.
func (c *collector) young(mod int64) bool { return mod == 0 || mod >= c.cutoff }

// problem counts a bad entry and keeps a few examples.
func (c *collector) problem(kind, path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rep.Problems[kind]++
	if len(c.rep.Examples[kind]) < maxExamples {
		c.rep.Examples[kind] = append(c.rep.Examples[kind], path)
	}
}

// markKey adds k to the marked set. Only the mark goroutine and the sweep's
// journal reads (never at once) call it.
func (c *collector) markKey(k dkey) { c.marked[k] = struct{}{} }

func (c *collector) isMarked(k dkey) bool { _, ok := c.marked[k]; return ok }

// hexOf returns the hex of k for building its paths.
func (c *collector) hexOf(k dkey) string { return c.keys.Hex(k) }

func (c *collector) progress() Progress {
	return Progress{
		Phase:        c.phase.Load().(string),
		Repositories: c.nRepos.Load(),
		Manifests:    c.nMan.Load(),
		Blobs:        c.nBlobs.Load(),
		Deleted:      c.nDeleted.Load(),
		Planned:      c.nPlanned.Load(),
		Elapsed:      time.Since(c.start),
	}
}

// ProblemKinds returns the kinds in r.Problems in a stable order.
func (r *Report) ProblemKinds() []string {
	kinds := slices.Sorted(maps.Keys(r.Problems))
	return kinds
}
