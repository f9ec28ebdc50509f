package gc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// PackIndex is what GC needs of the pack records (meta.Store has it; the
// pack lifecycle is package meta's), and of the file index to adopt an
// unrecorded pack that still holds referenced files (pack.Adopt).
type PackIndex interface {
	pack.AdoptIndex
	ListPacks(ctx context.Context, after string, limit int) ([]meta.PackInfo, error)
	TombstonePack(ctx context.Context, id string, olderThan time.Duration) (bool, error)
	DeletePack(ctx context.Context, id string) (bool, error)
}

// Compactor moves the live files of sparse packs into new ones (package
// pack's Store).
type Compactor interface {
	Compact(ctx context.Context, packs []meta.PackInfo) (pack.Compaction, error)
}

// DefaultCompactBelow is the live share under which a pack is compacted.
const DefaultCompactBelow = 0.5

// PackReport is what a run did to dedup's packs.
type PackReport struct {
	Packs int64 `json:"packs"` // records seen
	// Deleted packs had no live file left for the delay; Orphans are
	// objects without a record, older than the delay, none of whose files
	// the index references (a record lost, or an index rebuilt without
	// it). BytesFreed is their size (a deleted pack's as recorded:
	// without its index). Adopted are unrecorded packs that still held
	// referenced files nothing else locates: recorded and kept
	// (pack.Adopt); OrphansKept those whose index could not be read
	// (storage failed), kept. An object that is not a pack is an orphan.
	Deleted     int64 `json:"deleted"`
	Orphans     int64 `json:"orphans"`
	BytesFreed  int64 `json:"bytes_freed"`
	Adopted     int64 `json:"adopted,omitempty"`
	OrphansKept int64 `json:"orphans_kept,omitempty"`
	// Compacted packs had their live files moved to new packs; they are
	// deleted by a run after the delay.
	Compacted  int64 `json:"compacted"`
	FilesMoved int64 `json:"files_moved"`
	BytesMoved int64 `json:"bytes_moved"`
	// CompactErrors counts packs that could not be compacted (a damaged
	// object, a failed write): they stay as they are.
	CompactErrors int64 `json:"compact_errors"`
}

// sweepPacks walks the pack objects (one listing, in id order) beside the
// pack records (pages in id order) like a merge: an empty pack, dead for
// longer than the delay, is tombstoned and deleted with its record; an
// object without a record older than the delay is adopted if it holds
// referenced files nothing else locates, else deleted; a sparse pack is
// compacted. Memory holds one page of records and one batch of paths.
// Nothing here needs a fence: no writer relies on a pack that GC may
// delete (meta refuses to place files into a tombstoned one, and a pack
// only becomes empty once nothing points into it).
func (c *collector) sweepPacks(ctx context.Context) error {
	s := &packSweep{c: c, idx: c.opts.Packs, rep: c.rep.Packs}
	err := c.d.Walk(ctx, layout.PacksDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		id, ok := layout.ParsePackPath(fi.Path)
		if !ok {
			c.problem(ProblemBadPackPath, fi.Path)
			return nil
		}
		return s.object(ctx, id, fi)
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return err
	}
	if err := s.records(ctx, ""); err != nil {
		return err
	}
	return s.flush(ctx)
}

// ProblemOrphanPack: an unrecorded pack whose index could not be read or
// checked against the file index; it is kept.
const ProblemOrphanPack = "orphan_pack_unreadable"

// ProblemBadPackPath: a path under cairn/packs that is not a pack's.
const ProblemBadPackPath = "bad_pack_path"

// packSweep is one run's state of sweepPacks.
type packSweep struct {
	c         *collector
	idx       PackIndex
	rep       *PackReport
	page      []meta.PackInfo // records not yet judged, in id order
	after     string          // the cursor of the next page
	end       bool            // no more pages
	paths     []string        // objects to delete
	ids       []string        // records to delete once paths are gone
	sparse    []meta.PackInfo // compaction candidates
	sparseLiv int64
}

// object judges the pack object id, after every record before it.
func (s *packSweep) object(ctx context.Context, id string, fi driver.FileInfo) error {
	if err := s.records(ctx, id); err != nil {
		return err
	}
	if len(s.page) > 0 && s.page[0].ID == id {
		rec := s.page[0]
		s.page = s.page[1:]
		return s.judge(ctx, rec, fi.Path)
	}
	// No record: an orphan once older than the delay, unless recipes
	// still reference files only it holds.
	if s.c.young(modNS(fi.ModTime)) {
		return nil
	}
	if s.c.opts.DryRun {
		// Adopt reads against the preview index, which refuses the
		// records it would write (errWouldPlace): the real run adopts.
		if _, ok := s.idx.(*dryIndex); ok {
			_, err := pack.Adopt(ctx, s.c.d, s.idx, id, fi.Size)
			switch {
			case errors.Is(err, errWouldPlace):
				s.rep.Adopted++
				return nil
			case err != nil && !errors.Is(err, pack.ErrFormat):
				if ctx.Err() != nil {
					return nil
				}
				s.rep.OrphansKept++
				s.c.problem(ProblemOrphanPack, err.Error())
				return nil
			}
		}
		s.rep.Orphans++
		s.rep.BytesFreed += fi.Size
		return nil
	}
	a, err := pack.Adopt(ctx, s.c.d, s.idx, id, fi.Size)
	switch {
	case errors.Is(err, meta.ErrPackGone):
		return nil // recorded and tombstoned meanwhile: a later run deletes it
	case errors.Is(err, pack.ErrFormat):
		// Not a pack, or one whose index is damaged: nothing can be read
		// from it, so it serves no recipe.
	case err != nil:
		if ctx.Err() != nil {
			return nil
		}
		s.rep.OrphansKept++
		s.c.problem(ProblemOrphanPack, err.Error())
		return nil
	case a.Placed > 0:
		s.rep.Adopted++
		return nil
	}
	s.rep.Orphans++
	s.rep.BytesFreed += fi.Size
	return s.remove(ctx, fi.Path, "")
}

// records judges every record before id ("" : all that are left), which
// have no object.
func (s *packSweep) records(ctx context.Context, id string) error {
	for {
		if len(s.page) == 0 {
			if s.end {
				return nil
			}
			page, err := s.idx.ListPacks(ctx, s.after, s.c.opts.BatchSize)
			if err != nil {
				return fmt.Errorf("gc: listing packs: %w", err)
			}
			if len(page) == 0 {
				s.end = true
				return nil
			}
			s.page, s.after = page, page[len(page)-1].ID
			s.rep.Packs += int64(len(page))
		}
		if id != "" && s.page[0].ID >= id {
			return nil
		}
		rec := s.page[0]
		s.page = s.page[1:]
		if err := s.judge(ctx, rec, ""); err != nil {
			return err
		}
	}
}

// olderThan is how long ago a pack's last file must have left for the run
// to delete it: before the delay ahead of the run's start. A pack whose
// last file left after the run began is not the run's to judge. Taken
// afresh at each judgement, since the index compares it with its own
// clock's now: fixed at the sweep's start, it would reach into the run
// as the sweep went on.
func (s *packSweep) olderThan() time.Duration {
	return s.c.opts.Delay + time.Since(s.c.start)
}

// judge decides about one record; path is its object's, "" if none.
func (s *packSweep) judge(ctx context.Context, rec meta.PackInfo, path string) error {
	switch {
	case rec.Tombstoned || rec.Live == 0:
		if s.c.opts.DryRun {
			if rec.Tombstoned || time.Since(rec.Changed) >= s.olderThan() {
				s.rep.Deleted++
				s.rep.BytesFreed += rec.Size
			}
			return nil
		}
		ok, err := s.idx.TombstonePack(ctx, rec.ID, s.olderThan())
		if err != nil {
			return fmt.Errorf("gc: pack %s: %w", rec.ID, err)
		}
		if !ok {
			return nil
		}
		s.rep.Deleted++
		s.rep.BytesFreed += rec.Size
		return s.remove(ctx, path, rec.ID)
	case s.c.opts.Compactor != nil && rec.Size > 0 && float64(rec.Live) < s.c.opts.CompactBelow*float64(rec.Size):
		s.sparse = append(s.sparse, rec)
		s.sparseLiv += rec.Live
		return s.compact(ctx, false)
	}
	return nil
}

// remove queues a pack object (path may be "": none) and its record (id
// may be "": none) for deletion.
func (s *packSweep) remove(ctx context.Context, path, id string) error {
	if s.c.opts.DryRun {
		return nil
	}
	if path != "" {
		s.paths = append(s.paths, path)
	}
	if id != "" {
		s.ids = append(s.ids, id)
	}
	if len(s.paths) >= s.c.opts.BatchSize || len(s.ids) >= s.c.opts.BatchSize {
		return s.flush(ctx)
	}
	return nil
}

// flush deletes the queued objects in one call, then their records, and
// compacts what is left.
func (s *packSweep) flush(ctx context.Context) error {
	if err := s.compact(ctx, true); err != nil {
		return err
	}
	if len(s.paths) > 0 {
		n, err := s.c.d.DeleteFiles(ctx, s.paths)
		s.c.nDeleted.Add(int64(n))
		if err != nil {
			// Records stay tombstoned: the next run deletes again.
			s.c.deleteFailed(s.paths, n, err)
			s.paths, s.ids = s.paths[:0], s.ids[:0]
			return nil
		}
	}
	for _, id := range s.ids {
		if _, err := s.idx.DeletePack(ctx, id); err != nil {
			return fmt.Errorf("gc: pack %s: %w", id, err)
		}
	}
	s.paths, s.ids = s.paths[:0], s.ids[:0]
	return ctx.Err()
}

// compact moves the live files of the sparse packs gathered so far once
// they fill a new pack (or at the end, all).
func (s *packSweep) compact(ctx context.Context, all bool) error {
	if len(s.sparse) == 0 || (!all && s.sparseLiv < s.c.opts.CompactBatch && len(s.sparse) < s.c.opts.BatchSize) {
		return nil
	}
	packs := s.sparse
	s.sparse, s.sparseLiv = nil, 0
	if s.c.opts.DryRun {
		// Compaction moves every live file: the live bytes.
		s.rep.Compacted += int64(len(packs))
		for _, p := range packs {
			s.rep.BytesMoved += p.Live
		}
		return nil
	}
	m, err := s.c.opts.Compactor.Compact(ctx, packs)
	s.rep.Compacted += int64(m.Packs)
	s.rep.FilesMoved += m.Files
	s.rep.BytesMoved += m.Bytes
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		s.rep.CompactErrors += int64(len(packs) - m.Packs)
		s.c.problem(ProblemCompaction, err.Error())
	}
	return nil
}

// ProblemCompaction: packs that could not be compacted; they stay.
const ProblemCompaction = "pack_compaction"
