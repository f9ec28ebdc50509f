package gc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/digestkey"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/parallel"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// DedupIndex is what GC needs of the dedup metadata (meta.Store has it):
// the reference counts of the unique files under cairn/files and the
// layers' recipes. The file lifecycle is meta's (see package meta):
// release a dead layer's references, tombstone each file that reached
// zero, delete the object, then drop the entry. GC takes each step for a
// batch of layers or files in one call (meta.Bulk): one store round trip,
// one bolt commit, per batch rather than per layer or file. Each element
// of a call is atomic, the call is not: after an error, the result holds
// what was done.
type DedupIndex interface {
	// ReleaseLayers drops the references each layer holds, and its recipe
	// entry, and returns the files whose count reached zero; a second
	// call, or a layer never deduplicated, returns none.
	ReleaseLayers(ctx context.Context, layers []digest.Digest) ([]digest.Digest, error)
	// TombstoneFiles claims zero-count files for deletion and returns
	// those claimed; any other has references again (or no entry), and
	// must not be deleted.
	TombstoneFiles(ctx context.Context, files []digest.Digest) ([]digest.Digest, error)
	// DropFileEntries drops tombstoned entries once their objects are deleted,
	// and returns the files referenced again meanwhile (meta marks them
	// Missing, and dedup writes them anew).
	DropFileEntries(ctx context.Context, files []digest.Digest) (revived []digest.Digest, err error)
	// ZeroFiles pages through the files with no references, in key order
	// after `after`: what a run that stopped left to delete.
	ZeroFiles(ctx context.Context, after digest.Digest, limit int) ([]digest.Digest, error)
}

// DedupReport is what a run did to deduplicated files.
type DedupReport struct {
	// ZeroFiles is how many files the run's releases left unreferenced;
	// Resumed how many unreferenced files it found at its start (left by
	// a run that stopped).
	ZeroFiles int64 `json:"zero_files"`
	Resumed   int64 `json:"resumed"`
	// Rereferenced files were referenced again before their tombstone and
	// kept; Revived ones were referenced again after it and deleted all
	// the same (meta marks them Missing, so dedup writes them anew).
	Rereferenced int64 `json:"rereferenced"`
	Revived      int64 `json:"revived"`
	// Left is how many unreferenced files remain for a later run: their
	// delete failed, or the run was stopped.
	Left int64 `json:"left"`
}

// ProblemBadDedupFile: a file digest from the dedup index that does not
// parse; it is left alone.
const ProblemBadDedupFile = "bad_dedup_file"

// ProblemDedupIndex: the dedup index could not be shown complete for this
// storage; unique files and packs were kept.
const ProblemDedupIndex = "dedup_index_incomplete"

// checkDedupIndex decides whether this run may delete unique files and
// packs: only on the word of an index known complete for this storage.
func (c *collector) checkDedupIndex(ctx context.Context) error {
	if c.opts.DryRun {
		// Before anything reads them: a dry run releases and drops into
		// a preview of the indexes (sweep.go), to count what the real
		// run would.
		c.previewDedup()
	}
	if c.opts.Dedup == nil && c.opts.Packs == nil {
		return nil
	}
	c.rep.DedupIndex = "complete"
	if c.opts.DedupComplete == nil {
		return nil
	}
	ok, err := c.opts.DedupComplete(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		c.keepDedup, c.rep.DedupIndex = true, "unknown: "+err.Error()
	case !ok:
		c.keepDedup, c.rep.DedupIndex = true, "incomplete: it is being rebuilt from storage, or indexes another storage"
	}
	if c.keepDedup {
		c.problem(ProblemDedupIndex, c.rep.DedupIndex)
	}
	return nil
}

// drainZeroFiles deletes the unreferenced files a stopped run left, page
// by page, before this run adds its own.
func (c *collector) drainZeroFiles(ctx context.Context) error {
	page := c.opts.BatchSize * c.opts.Concurrency
	var after digest.Digest
	for {
		files, err := c.opts.Dedup.ZeroFiles(ctx, after, page)
		if err != nil {
			return fmt.Errorf("gc: dedup: listing unreferenced files: %w", err)
		}
		if len(files) == 0 {
			return nil
		}
		after = files[len(files)-1]
		c.addDedup(func(r *DedupReport) { r.Resumed += int64(len(files)) })
		if err := c.purgeFiles(ctx, files); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("gc: dedup: %w", err)
		}
		if len(files) < page {
			return nil
		}
	}
}

// releaseLayers releases the references and recipe entries of blobs a
// round deleted, BatchSize layers per call and up to Concurrency calls at
// once, and deletes the files nobody references any more, BatchSize at a
// time, so memory stays bounded by the round. The releases run even when
// the run is being stopped: their blobs are gone, and a release skipped
// now would be lost (a stopped purge is not: its files stay unreferenced,
// for the next run's drainZeroFiles).
func (c *collector) releaseLayers(ctx context.Context, keys []dkey) error {
	bg := context.WithoutCancel(ctx)
	bs := c.opts.BatchSize
	var (
		mu   sync.Mutex
		zero []digest.Digest
	)
	err := c.parallel((len(keys)+bs-1)/bs, func(b int) error {
		chunk := keys[b*bs : min(len(keys), (b+1)*bs)]
		layers := make([]digest.Digest, len(chunk))
		for i, k := range chunk {
			layers[i] = digest.Digest(k.Alg() + ":" + c.hexOf(k))
		}
		// Each layer's recipe entry goes with its references, in one step:
		// an entry gone first would leave references nothing names.
		files, rerr := c.opts.Dedup.ReleaseLayers(bg, layers)
		if rerr != nil {
			rerr = fmt.Errorf("gc: dedup: releasing %d layers: %w", len(layers), rerr)
		}
		// Files released before an error are purged all the same.
		if len(files) == 0 {
			return rerr
		}
		c.addDedup(func(r *DedupReport) { r.ZeroFiles += int64(len(files)) })
		if c.keepDedup {
			// Kept unreferenced in the index: a run on a complete
			// index deletes them (drainZeroFiles).
			c.addDedup(func(r *DedupReport) { r.Left += int64(len(files)) })
			return rerr
		}
		mu.Lock()
		zero = append(zero, files...)
		// Whole batches go now, the rest waits for more.
		var batch []digest.Digest
		if n := len(zero) / bs * bs; n > 0 {
			batch, zero = zero[:n], slices.Clone(zero[n:])
		}
		mu.Unlock()
		if err := c.purgeBatches(ctx, batch); err != nil {
			return errors.Join(rerr, err)
		}
		return rerr
	})
	if err != nil {
		return err
	}
	return c.purgeBatches(ctx, zero)
}

// purgeFiles deletes unreferenced files in batches of BatchSize, up to
// Concurrency batches at once.
func (c *collector) purgeFiles(ctx context.Context, files []digest.Digest) error {
	bs := c.opts.BatchSize
	return c.parallel((len(files)+bs-1)/bs, func(b int) error {
		return c.purgeBatch(ctx, files[b*bs:min(len(files), (b+1)*bs)])
	})
}

// purgeBatches is purgeFiles one batch after another, for a caller that
// already runs Concurrency at once.
func (c *collector) purgeBatches(ctx context.Context, files []digest.Digest) error {
	for len(files) > 0 {
		n := min(len(files), c.opts.BatchSize)
		if err := c.purgeBatch(ctx, files[:n]); err != nil {
			return err
		}
		files = files[n:]
	}
	return nil
}

// purgeBatch tombstones each file, deletes the tombstoned ones' objects in
// one DeleteFiles call and then their entries. A file whose object may not
// be gone keeps its entry (tombstoned, unreferenced): the next run resumes
// it. The error is the index's; a stopped run is not an error here.
func (c *collector) purgeBatch(ctx context.Context, files []digest.Digest) error {
	if c.opts.DryRun {
		// The preview index (dryIndex) tombstones and drops in memory
		// only: the files counted are those the real run's index would
		// let it delete, and their bytes leave their packs' live counts.
		n := int64(len(files))
		if c.previewing() {
			tomb, err := c.opts.Dedup.TombstoneFiles(ctx, files)
			if err != nil {
				return stopped(ctx, fmt.Errorf("gc: dedup: %w", err))
			}
			if _, err := c.opts.Dedup.DropFileEntries(ctx, tomb); err != nil {
				return stopped(ctx, fmt.Errorf("gc: dedup: %w", err))
			}
			n = int64(len(tomb))
			c.addDedup(func(r *DedupReport) { r.Rereferenced += int64(len(files)) - n })
		}
		c.mu.Lock()
		c.rep.Deleted.DedupFiles += n
		c.mu.Unlock()
		return nil
	}
	var deleted, reref, revived int64
	if ctx.Err() != nil {
		c.addDedup(func(r *DedupReport) { r.Left += int64(len(files)) })
		return nil
	}
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.rep.Deleted.DedupFiles += deleted
		r := c.rep.Dedup
		r.Rereferenced += reref
		r.Revived += revived
		r.Left += int64(len(files)) - deleted - reref
	}()

	tomb, err := c.opts.Dedup.TombstoneFiles(ctx, files)
	if err != nil {
		// Those it tombstoned stay so, unreferenced: the next run
		// resumes them.
		return stopped(ctx, fmt.Errorf("gc: dedup: tombstoning %d files: %w", len(files), err))
	}
	reref = int64(len(files) - len(tomb))
	if len(tomb) == 0 {
		return nil
	}

	// One buffer and one string for the batch's paths, not one per path.
	buf := make([]byte, 0, len(tomb)*(len(layout.FilesDir)+3+len("sha256/xx/")+64))
	ends := make([]int, 0, len(tomb))
	keep := tomb[:0]
	for _, d := range tomb {
		alg, hexs, _ := strings.Cut(string(d), ":")
		if _, ok := digestkey.Parse(alg, hexs); !ok {
			c.problem(ProblemBadDedupFile, string(d))
			continue
		}
		buf = layout.AppendFile(buf, alg, hexs)
		ends = append(ends, len(buf))
		keep = append(keep, d)
	}
	tomb = keep
	all := string(buf)
	paths := make([]string, len(tomb))
	start := 0
	for i, end := range ends {
		paths[i], start = all[start:end], end
	}
	n, err := c.d.DeleteFiles(ctx, paths)
	if err != nil {
		// Which paths are gone is not certain: none of the entries is
		// dropped, and a later run deletes them again (a missing file
		// counts as deleted).
		c.deleteFailed(paths, n, err)
		return nil
	}
	rev, err := c.opts.Dedup.DropFileEntries(ctx, tomb)
	if err != nil {
		// The entries it did not drop stay tombstoned: the next run deletes
		// their objects again (a missing file counts as deleted).
		return stopped(ctx, fmt.Errorf("gc: dedup: deleting the entries of %d files: %w", len(tomb), err))
	}
	deleted, revived = int64(len(tomb)), int64(len(rev))
	return nil
}

// deleteFailed records a failed DeleteFiles call of files.
func (c *collector) deleteFailed(paths []string, n int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	named := 0
	errs := flatten(err)
	for _, e := range errs {
		if len(c.rep.DeleteErrors) < maxExamples {
			c.rep.DeleteErrors = append(c.rep.DeleteErrors, e.Error())
		}
	}
	for _, p := range paths {
		for _, e := range errs {
			if strings.Contains(e.Error(), p) {
				named++
				break
			}
		}
	}
	if named == 0 {
		named = len(paths) - n
	}
	c.rep.DeleteFailures += int64(named)
}

// stopped turns an index error caused by the run being stopped into nil:
// what is left is resumed by the next run.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// addDedup updates the dedup report.
func (c *collector) addDedup(fn func(r *DedupReport)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(c.rep.Dedup)
}

// parallel calls fn(i) for every i < n, Concurrency at once, and returns
// the first error; after one, no further call starts.
func (c *collector) parallel(n int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	parallel.For(ctx, n, c.opts.Concurrency, func(i int) {
		if err := fn(i); err != nil {
			cancel(err)
		}
	})
	return context.Cause(ctx)
}

// sweepTmp deletes what interrupted dedup writes left under cairn/tmp
// (large files being written, layers being promoted) once older than the
// delay. Nothing names these files, so this is the one place GC lists
// before deleting.
func (c *collector) sweepTmp(ctx context.Context) error {
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n := int64(len(batch))
		if !c.opts.DryRun {
			k, err := c.d.DeleteFiles(ctx, batch)
			n = int64(k)
			if err != nil {
				c.deleteFailed(batch, k, err)
			}
		}
		c.mu.Lock()
		c.rep.Deleted.TmpFiles += n
		c.mu.Unlock()
		batch = batch[:0]
		return ctx.Err()
	}
	err := c.d.Walk(ctx, layout.TmpDir, func(fi driver.FileInfo) error {
		if fi.IsDir || c.young(modNS(fi.ModTime)) {
			return nil
		}
		batch = append(batch, fi.Path)
		if len(batch) >= c.opts.BatchSize {
			return flush()
		}
		return nil
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return err
	}
	return flush()
}
