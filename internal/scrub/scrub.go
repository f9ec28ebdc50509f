// Package scrub is cairn's fsck: it reads the whole store, checks every
// piece against what names it, and reports what is wrong by kind, path and
// digest. With Options.Repair it mends what can be mended from what is
// still intact; it never deletes anything.
//
// # Checks, in the order they run
//
//   - blobs: one listing of blobs/ finds every blob's data and recipe; each
//     data file is streamed through its digest algorithm (KindCorruptBlob).
//   - files: one listing of cairn/files finds every unique dedup file stored
//     as an object of its own (stores from before packs); each is
//     decompressed (they are stored zstd-compressed) and hashed
//     (KindCorruptFile). One listing of cairn/packs finds every pack; its
//     index is read from the object alone (KindDamagedPack when it cannot
//     be), and its frames are streamed with one ranged read per run of them
//     (pack.VerifyFrames), each decompressed and checked for its size and
//     digest (KindCorruptFile naming the pack and the frame's offset).
//   - recipes: every recipe is read and decoded (KindBadRecipe), and every
//     file it names is looked up where it is read from (KindMissingFile, one
//     finding per file, counting the recipes that need it): with a metadata
//     store, at its location, which must name a stored pack whose index
//     lists the file there; without one, in any pack or object found.
//     Recipes are then rebuilt, all of them or a seeded random sample,
//     through dedup's own restore, and must reproduce their blob's digest
//     (KindRebuildFailed).
//   - repositories: one listing of repositories/ (upload sessions skipped)
//     yields each repository's _layers links, revisions, tags and
//     referrers-index links. A layer link must name a stored blob (data or
//     recipe: KindMissingBlob, which is also how a deduplicated layer whose
//     recipe is gone shows), a revision a manifest with data
//     (KindMissingManifest), a tag's current link a revision of the
//     repository (KindDanglingTag), a referrers link a revision
//     (KindDanglingReferrer). Every revision's manifest is read once
//     (KindBadManifest); what it names must be linked into the repository
//     as a push would have required (KindMissingLink, or KindMissingBlob
//     when the blob itself is gone). Tag index entries are history and
//     only their form is checked; with Options.ReadLinks every link's
//     content must be the digest its path names (KindBadLink).
//
// # The metadata store
//
// Recipes and packs live in storage and say what they hold, but only the
// metadata store (Options.Meta, optional) says where each file is read
// from. With it: packed layers are rebuilt; a pack no file is located in,
// and a frame no location names, are dead bytes GC reclaims, not read
// (Counts.DeadPacks, DeadFiles), so a corrupt copy there, or a corrupt
// object of its own of a file located in a pack, is no finding; a file
// located in a pack that is gone, damaged or does not list it is missing.
// Without it: every pack is verified and every file found in one counts as
// stored (a corrupt copy is a finding only when no intact copy was
// found); layers whose files are in packs cannot be rebuilt, which the
// report says once (Report.Notes, Counts.RebuildSkipped), and packed files
// are not repaired.
//
// Memory: the blobs and the files found are held as sorted arrays of
// fixed-size digests (34 and 33 bytes each), one repository's links and
// one pack's index per worker at a time, and nothing else per object: data
// streams through hashes.
//
// # Request cost on object stores
//
// Listings are flat (Walk: one LIST request per 1000 keys). Each blob and
// file of its own costs one streamed GET, each pack two ranged GETs for
// its index and one per run of frames (dead gaps over 1 MiB are skipped),
// each recipe one GET, each tag and each manifest one GET; a rebuild reads
// packs as a pull does. With a metadata store, one call per 4096 entries
// of a pack and per recipe whose files the pass did not find where they
// are read from. Nothing is stat'ed per object: a finding that says
// something is missing rests on a listing, and is confirmed by a Stat of
// that one path (for a packed file, its pack, its index read again and its
// location looked up again) before it is reported, which also keeps writes
// that raced the listing (a push, a GC, dedup, a compaction) from showing
// as findings. With ReadLinks, one GET per link.
//
// # Repair
//
// Repair writes only what is missing or corrupt, never deletes, and
// reports for each finding what it did or why it could not:
//   - a dedup file that is missing or corrupt is written anew from a layer
//     whose intact data (verified in the blobs pass) holds it, by
//     disassembling that layer with the dedup machinery; the bytes stored
//     are exactly the payload that hashed to the file's digest. A file
//     read from a pack goes into a new pack (pack.Writer), whose Flush
//     locates it there in the metadata store: the old bytes are dead, for
//     GC's compaction to reclaim, and a damaged pack whose files all moved
//     out is deleted by GC as an empty one. This needs the metadata store;
//     without it the finding says so. A file with no location (a store
//     from before packs) is replaced as an object of its own;
//   - a corrupt blob with a recipe is rebuilt from the recipe, checked
//     against its digest, and moved over the data;
//   - a tag whose revision link is missing, an index child not linked as a
//     revision, and a manifest missing from its subject's referrers get
//     their links back (registry.RelinkManifest), when the manifest's data
//     is stored and hashes to its digest;
//   - a manifest's config or layer whose _layers link is missing gets it
//     back when the blob is stored (registry.MountBlob);
//   - with ReadLinks, a link whose content is wrong is rewritten with the
//     digest its path names.
//
// Link repairs follow the registry's GC journal protocol, so a GC running
// meanwhile cannot delete what they link. A repaired file keeps the
// reference counts its recipes already hold.
package scrub

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	// Blobs may be addressed by sha384 and sha512 as well.
	_ "crypto/sha256"
	_ "crypto/sha512"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/digestkey"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/repeat"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Kind names what is wrong.
type Kind string

// Finding kinds.
const (
	KindCorruptBlob      Kind = "corrupt-blob"      // blob data does not hash to its digest
	KindCorruptFile      Kind = "corrupt-file"      // a dedup file does not decompress to its digest
	KindMissingFile      Kind = "missing-file"      // a recipe names a dedup file that is not stored
	KindBadRecipe        Kind = "bad-recipe"        // a recipe does not parse or does not describe its blob
	KindRebuildFailed    Kind = "rebuild-failed"    // a recipe's rebuild does not reproduce its blob
	KindMissingBlob      Kind = "missing-blob"      // a link or manifest names a blob with neither data nor recipe
	KindMissingManifest  Kind = "missing-manifest"  // a revision (or an index) names a manifest without data
	KindDanglingTag      Kind = "dangling-tag"      // a tag's current link names no revision of its repository
	KindDanglingReferrer Kind = "dangling-referrer" // a referrers-index link names no revision
	KindMissingLink      Kind = "missing-link"      // a manifest names content its repository does not link
	KindBadLink          Kind = "bad-link"          // a link's content is not the digest it should hold
	KindBadManifest      Kind = "bad-manifest"      // a manifest does not parse
	KindBadPath          Kind = "bad-path"          // a layout path whose digest does not parse
	KindDamagedPack      Kind = "damaged-pack"      // a pack object whose index cannot be read
	KindUnreadable       Kind = "unreadable"        // storage failed to return an object
)

// Finding is one thing wrong with the store.
type Finding struct {
	Kind Kind `json:"kind"`
	// Path is the stored file at fault, or the one that should exist.
	Path string `json:"path"`
	// Digest is the digest Path is, or names.
	Digest string `json:"digest,omitempty"`
	// Ref is the other digest involved: the manifest naming a missing
	// link's target, a missing file's example recipe, a referrer's subject.
	Ref string `json:"ref,omitempty"`
	// Offset is where in the pack at Path the file at fault is (its
	// frame), for a file stored in a pack.
	Offset int64  `json:"offset,omitempty"`
	Detail string `json:"detail"`
	// Repaired: Repair fixed it. Repair says how, or why it could not.
	Repaired bool   `json:"repaired,omitempty"`
	Repair   string `json:"repair,omitempty"`
}

// RecipeMode says which recipes are rebuilt.
type RecipeMode string

// Recipe modes: every file a recipe names is looked up in all of them.
const (
	RecipesAll    RecipeMode = "all"    // rebuild every recipe
	RecipesSample RecipeMode = "sample" // rebuild Options.Sample recipes chosen by Options.Seed
	RecipesNone   RecipeMode = "none"   // rebuild none
)

// ParseRecipeMode checks a --recipes value.
func ParseRecipeMode(s string) (RecipeMode, error) {
	switch m := RecipeMode(s); m {
	case RecipesAll, RecipesSample, RecipesNone:
		return m, nil
	}
	return "", fmt.Errorf("scrub: recipes %q: want all, sample or none", s)
}

// Defaults for Options.
const (
	DefaultSample      = 16
	DefaultWorkers     = 4
	DefaultMaxFindings = 100_000
)

// Options tune a run. Zero values take the defaults.
type Options struct {
	// Recipes: which recipes are rebuilt (default RecipesSample).
	Recipes RecipeMode
	// Sample is how many recipes RecipesSample rebuilds, chosen uniformly
	// by a generator seeded with Seed (so a run can be repeated).
	Sample int
	Seed   uint64
	// Workers bounds the objects verified at once (default 4).
	Workers int
	// ReadLinks also reads every link's content (one GET per link).
	ReadLinks bool
	// Repair mends what it can (see the package comment).
	Repair bool
	// Sparse: the registry accepts manifests whose blobs were never pushed
	// (validation.manifests.sparse), so what a manifest names is not checked.
	Sparse bool
	// IndexChildrenOptional: index children need not be revisions of the
	// repository (validation.manifests.indexes.platforms other than all).
	IndexChildrenOptional bool
	// MaxFindings bounds the findings kept in the report; more are counted
	// in Report.Dropped (default 100,000).
	MaxFindings int
	// Progress, when set, is called about every ProgressInterval (default
	// 1s) from another goroutine, and once at the end.
	Progress         func(Progress)
	ProgressInterval time.Duration
	// Log receives what the dedup restore logs (default: discarded).
	Log *slog.Logger
	// Meta is the metadata store (nil: none), which locates files in
	// packs: with it packed layers are rebuilt, each file a recipe names
	// is checked where its location says, only the frames files are
	// located at count, and repair writes files into new packs. Without
	// it packs are verified all the same, but layers whose files are in
	// packs cannot be rebuilt, nor packed files repaired.
	Meta Meta
	// Packs tunes the pack store repair writes through.
	Packs pack.Options
}

// Meta is what scrub uses of the metadata store: file locations, pack
// records, and placing repaired files into new packs.
type Meta interface {
	pack.Index
	ListPacks(ctx context.Context, after string, limit int) ([]meta.PackInfo, error)
}

func (o Options) withDefaults() Options {
	if o.Recipes == "" {
		o.Recipes = RecipesSample
	}
	if o.Sample <= 0 {
		o.Sample = DefaultSample
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.MaxFindings <= 0 {
		o.MaxFindings = DefaultMaxFindings
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Counts tell what a run read.
type Counts struct {
	Blobs     int64 `json:"blobs"`      // data files verified
	BlobBytes int64 `json:"blob_bytes"` // bytes hashed
	Files     int64 `json:"files"`      // dedup files verified (objects of their own and frames of packs)
	FileBytes int64 `json:"file_bytes"` // uncompressed bytes hashed
	Packs     int64 `json:"packs"`      // pack objects whose index was read
	PackBytes int64 `json:"pack_bytes"` // stored bytes of packs read
	// DeadPacks and DeadFiles are packs and frames in packs that no
	// location names (only known with Options.Meta): dead bytes GC
	// reclaims, never read by a pull, and so not verified.
	DeadPacks    int64 `json:"dead_packs,omitempty"`
	DeadFiles    int64 `json:"dead_files,omitempty"`
	Recipes      int64 `json:"recipes"` // recipes read
	Rebuilt      int64 `json:"rebuilt"` // recipes rebuilt
	RebuiltBytes int64 `json:"rebuilt_bytes"`
	// RebuildSkipped counts recipes chosen for a rebuild that could not
	// be: their files are in packs, and no metadata store locates them.
	RebuildSkipped int64 `json:"rebuild_skipped,omitempty"`
	Repositories   int64 `json:"repositories"`
	Manifests      int64 `json:"manifests"`
	Tags           int64 `json:"tags"`
	Links          int64 `json:"links"` // _layers, revision, tag index and referrers links
	// Vanished counts objects listed but deleted before they were read
	// (a GC or dedup at work): not findings.
	Vanished int64 `json:"vanished"`
}

// Report is the outcome of a run.
type Report struct {
	Started time.Time  `json:"started"`
	Seconds float64    `json:"duration_seconds"`
	Recipes RecipeMode `json:"recipes"`
	Sample  int        `json:"sample,omitempty"`
	Seed    uint64     `json:"seed"`
	Repair  bool       `json:"repair"`
	// Metadata: a metadata store located files (Options.Meta).
	Metadata bool   `json:"metadata"`
	Counts   Counts `json:"counts"`
	// Notes say what the run could not check, once each.
	Notes []string `json:"notes,omitempty"`
	// Findings, sorted by path then kind; ByKind counts them all,
	// including the Dropped ones beyond Options.MaxFindings.
	Findings []Finding      `json:"findings"`
	ByKind   map[Kind]int64 `json:"by_kind"`
	Dropped  int64          `json:"dropped,omitempty"`
	Repaired int64          `json:"repaired"`
	// Requests counts storage driver calls by kind.
	Requests map[string]int64 `json:"requests"`
	// PhaseSeconds is how long each phase took (blobs, files, recipes,
	// repair, repositories): bytes over seconds is its throughput.
	PhaseSeconds map[string]float64 `json:"phase_seconds"`
}

// Remaining is how many findings Repair did not fix (all of them without
// Repair).
func (r *Report) Remaining() int64 {
	var n int64
	for _, c := range r.ByKind {
		n += c
	}
	return n - r.Repaired
}

// Progress is a snapshot of a run's counters.
type Progress struct {
	Phase    string // "blobs", "files", "recipes", "repair", "repositories" or "done"
	Counts   Counts
	Listed   int64 // objects listed in this phase so far
	Findings int64
	Elapsed  time.Duration
}

// Run scrubs the store d holds. The error is nil when every check ran;
// what is wrong with the store is in the report's findings. A failed
// listing ends the run with an error (the report says what was done).
func Run(ctx context.Context, d driver.Driver, opts Options) (*Report, error) {
	s, err := newScrubber(d, opts)
	if err != nil {
		return nil, err
	}
	return s.run(ctx)
}

// scrubber is one run's state.
type scrubber struct {
	d     *driver.Counting
	opts  Options
	meta  Meta        // nil: none
	packs *pack.Store // locates files through meta; repair writes through it
	src   *dedup.Source
	reg   *registry.Registry
	start time.Time
	bufs  sync.Pool // *[]byte copy buffers, one per object streamed

	blobs blobSet // every blob listed, sealed after the blobs pass
	// The dedup files found stored and not corrupt (or unreadable: stored
	// all the same), sealed after the files pass: objects of their own,
	// and files in packs (with meta only those located where found).
	objectSet, packSet keySet
	// records is every pack's live bytes, as the metadata store had them
	// before the files pass (with meta only); read-only after.
	records map[string]int64

	keys digestkey.Spellings // full hex of keys longer than sha256

	mu       sync.Mutex // guards the fields below
	phases   map[string]float64
	findings []Finding
	byKind   map[Kind]int64
	dropped  int64
	repaired int64
	corrupt  map[key]corruptBlob     // blobs whose data failed its digest
	bad      map[key]*badFile        // dedup files corrupt or missing
	appeared map[key]bool            // files not found where listed but stored when looked for
	damaged  map[string]*damagedPack // packs whose index cannot be read, by id
	// needMeta: corrupt blobs whose recipe names files in packs, which
	// only a metadata store locates.
	needMeta map[key]bool
	fatal    error // the first failure of the metadata store: ends the run

	phase                           atomic.Value
	nListed                         atomic.Int64
	nBlobs, nBlobBytes              atomic.Int64
	nFiles, nFileBytes              atomic.Int64
	nPacks, nPackBytes              atomic.Int64
	nDeadPacks, nDeadFiles          atomic.Int64
	nRebuildSkipped                 atomic.Int64
	nRecipes, nRebuilt, nRebuiltB   atomic.Int64
	nRepos, nManifests, nTags, nLnk atomic.Int64
	nVanished, nFindings            atomic.Int64
}

type corruptBlob struct {
	finding int // index in findings, -1 when dropped
	k       key
	digest  digest.Digest
}

func newScrubber(d driver.Driver, opts Options) (*scrubber, error) {
	opts = opts.withDefaults()
	cd := driver.NewCounting(d)
	var idx pack.Index
	if opts.Meta != nil {
		idx = opts.Meta
	}
	packs, err := pack.NewStore(cd, idx, opts.Packs, opts.Log)
	if err != nil {
		return nil, err
	}
	s := &scrubber{
		d: cd, opts: opts, meta: opts.Meta, packs: packs,
		src:      dedup.NewSource(cd, packs, opts.Log),
		reg:      registry.New(cd, registry.Options{}),
		phases:   make(map[string]float64),
		byKind:   make(map[Kind]int64),
		corrupt:  make(map[key]corruptBlob),
		bad:      make(map[key]*badFile),
		appeared: make(map[key]bool),
		damaged:  make(map[string]*damagedPack),
		needMeta: make(map[key]bool),
	}
	s.bufs.New = func() any { b := make([]byte, 256<<10); return &b }
	s.phase.Store("blobs")
	return s, nil
}

func (s *scrubber) run(ctx context.Context) (rep *Report, err error) {
	s.start = time.Now()
	stop := repeat.Report(s.opts.ProgressInterval, s.opts.Progress, s.progress)
	defer func() {
		s.phase.Store("done")
		stop()
		rep = s.report()
	}()
	steps := []struct {
		phase string
		fn    func(context.Context) error
	}{
		{"blobs", s.scanBlobs},
		{"files", s.scanFiles},
		{"recipes", s.checkRecipes},
		{"repair", s.repairStore},
		{"repositories", s.checkRepos},
	}
	for _, st := range steps {
		s.phase.Store(st.phase)
		s.nListed.Store(0)
		t := time.Now()
		err := st.fn(ctx)
		s.mu.Lock()
		s.phases[st.phase] = time.Since(t).Seconds()
		if err == nil {
			err = s.fatal
		}
		s.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("scrub: %s: %w", st.phase, err)
		}
	}
	return nil, nil
}

func (s *scrubber) report() *Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := slices.Clone(s.findings)
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Offset, b.Offset), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Ref, b.Ref))
	})
	r := &Report{
		Started:      s.start.UTC(),
		Seconds:      time.Since(s.start).Seconds(),
		Recipes:      s.opts.Recipes,
		Seed:         s.opts.Seed,
		Repair:       s.opts.Repair,
		Metadata:     s.meta != nil,
		Counts:       s.counts(),
		Notes:        s.notes(),
		Findings:     fs,
		ByKind:       make(map[Kind]int64, len(s.byKind)),
		Dropped:      s.dropped,
		Repaired:     s.repaired,
		Requests:     s.d.Counts(),
		PhaseSeconds: maps.Clone(s.phases),
	}
	if s.opts.Recipes == RecipesSample {
		r.Sample = s.opts.Sample
	}
	for k, n := range s.byKind {
		r.ByKind[k] = n
	}
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	return r
}

func (s *scrubber) counts() Counts {
	return Counts{
		Blobs: s.nBlobs.Load(), BlobBytes: s.nBlobBytes.Load(),
		Files: s.nFiles.Load(), FileBytes: s.nFileBytes.Load(),
		Packs: s.nPacks.Load(), PackBytes: s.nPackBytes.Load(),
		DeadPacks: s.nDeadPacks.Load(), DeadFiles: s.nDeadFiles.Load(),
		Recipes: s.nRecipes.Load(), Rebuilt: s.nRebuilt.Load(), RebuiltBytes: s.nRebuiltB.Load(),
		RebuildSkipped: s.nRebuildSkipped.Load(),
		Repositories:   s.nRepos.Load(), Manifests: s.nManifests.Load(), Tags: s.nTags.Load(),
		Links: s.nLnk.Load(), Vanished: s.nVanished.Load(),
	}
}

// notes says once what the run could not check.
func (s *scrubber) notes() []string {
	var out []string
	if n := s.nRebuildSkipped.Load(); n > 0 {
		out = append(out, fmt.Sprintf("%d recipes were not rebuilt: their files are in packs, which only the metadata store "+
			"locates, and scrub ran without one (give it the configuration's storage.dedup.metadata)", n))
	}
	return out
}

// failMeta ends the run after the metadata store failed: without it
// findings would rest on guesses.
func (s *scrubber) failMeta(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal == nil {
		s.fatal = fmt.Errorf("metadata store: %w", err)
	}
}

// add records a finding and returns its index, -1 when it was only counted.
func (s *scrubber) add(f Finding) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addLocked(f)
}

func (s *scrubber) addLocked(f Finding) int {
	s.byKind[f.Kind]++
	s.nFindings.Add(1)
	if f.Repaired {
		s.repaired++
	}
	if len(s.findings) >= s.opts.MaxFindings {
		s.dropped++
		return -1
	}
	s.findings = append(s.findings, f)
	return len(s.findings) - 1
}

// repairedAt marks finding i repaired (or says why not) once repair ran.
func (s *scrubber) repairedAt(i int, ok bool, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.repaired++
	}
	if i < 0 {
		return
	}
	s.findings[i].Repaired, s.findings[i].Repair = ok, how
}

func (s *scrubber) progress() Progress {
	return Progress{
		Phase:    s.phase.Load().(string),
		Counts:   s.counts(),
		Listed:   s.nListed.Load(),
		Findings: s.nFindings.Load(),
		Elapsed:  time.Since(s.start),
	}
}

// getContent reads a small file, trying again after transient failures.
func (s *scrubber) getContent(ctx context.Context, p string) ([]byte, error) {
	var b []byte
	err := retry(ctx, func() error {
		var err error
		b, err = s.d.GetContent(ctx, p)
		return err
	})
	return b, err
}

// readListed reads a small file the listing found; ok is false when it
// was deleted since (counted as vanished) or could not be read (reported,
// with d, the digest it holds or names).
func (s *scrubber) readListed(ctx context.Context, p string, d digest.Digest) (b []byte, ok bool) {
	b, err := s.getContent(ctx, p)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		s.nVanished.Add(1)
		return nil, false
	case err != nil:
		s.unreadable(ctx, p, d, err)
		return nil, false
	}
	return b, true
}

// retry runs fn up to three times while it fails with anything but
// not-found or the end of ctx.
func retry(ctx context.Context, fn func() error) error {
	return repeat.Retry(ctx, 3, func(err error) bool {
		// A file that does not decompress will not on a second read,
		// nor will a damaged pack.
		return errors.Is(err, driver.ErrNotFound) || errors.Is(err, errCorruptFile) || errors.Is(err, pack.ErrFormat)
	}, fn)
}

// missingNow reports whether every path is absent now (a Stat each): the
// confirmation of a finding a listing suggested. A storage error is not
// an absence.
func (s *scrubber) missingNow(ctx context.Context, paths ...string) (bool, error) {
	for _, p := range paths {
		err := retry(ctx, func() error { _, err := s.d.Stat(ctx, p); return err })
		if err == nil {
			return false, nil
		}
		if !errors.Is(err, driver.ErrNotFound) {
			return false, err
		}
	}
	return true, nil
}

// unreadable records a read that failed for another reason than absence.
func (s *scrubber) unreadable(ctx context.Context, p string, d digest.Digest, err error) {
	if ctx.Err() != nil {
		return
	}
	s.add(Finding{Kind: KindUnreadable, Path: p, Digest: string(d), Detail: oneLine(err.Error())})
}
