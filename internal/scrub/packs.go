package scrub

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/parallel"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// damagedPack is a pack whose index cannot be read.
type damagedPack struct {
	finding int   // index in findings, -1 when dropped
	live    int64 // bytes the metadata store locates in it (-1: no store)
}

// packJob is one pack object the listing found.
type packJob struct {
	id   string
	size int64
}

// scanPacks lists cairn/packs once; each pack goes to a worker that reads
// its index and verifies its frames. With a metadata store, the pack
// records are read first: a pack no file is located in is dead (GC
// deletes it) and not read, and of the others only the frames files are
// located at are verified and count as stored.
func (s *scrubber) scanPacks(ctx context.Context) error {
	if s.meta != nil {
		if err := s.loadRecords(ctx); err != nil {
			return err
		}
	}
	p := parallel.StartPool(s.opts.Workers, func(j packJob) { s.verifyPack(ctx, j) })
	err := s.d.Walk(ctx, layout.PacksDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		id, ok := layout.ParsePackPath(fi.Path)
		if !ok {
			return nil // not part of the layout
		}
		s.nListed.Add(1)
		return p.Send(ctx, packJob{id: id, size: fi.Size})
	})
	p.Wait()
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	return err
}

// loadRecords reads every pack record's live bytes.
func (s *scrubber) loadRecords(ctx context.Context) error {
	s.records = make(map[string]int64)
	after := ""
	for {
		ps, err := s.meta.ListPacks(ctx, after, 1000)
		if err != nil {
			return fmt.Errorf("metadata store: listing packs: %w", err)
		}
		if len(ps) == 0 {
			return nil
		}
		for _, p := range ps {
			if !p.Tombstoned && p.Live > 0 { // the others are dead: absent reads as 0
				s.records[p.ID] = p.Live
			}
		}
		after = ps[len(ps)-1].ID
	}
}

// verifyPack reads pack j's index from the object and verifies its frames
// (the live ones, with a metadata store).
func (s *scrubber) verifyPack(ctx context.Context, j packJob) {
	if ctx.Err() != nil {
		return
	}
	p := layout.Pack(j.id)
	live := int64(-1)
	if s.meta != nil {
		if live = s.records[j.id]; live == 0 {
			// Being written (its files not placed yet), dropped or
			// compacted: no pull reads it.
			s.nDeadPacks.Add(1)
			return
		}
	}
	var entries []pack.Entry
	var dataEnd int64
	err := retry(ctx, func() error {
		var err error
		entries, dataEnd, err = pack.ObjectIndex(ctx, s.d, j.id, j.size)
		return err
	})
	switch {
	case errors.Is(err, driver.ErrNotFound):
		s.nVanished.Add(1)
		return
	case errors.Is(err, pack.ErrFormat):
		s.addDamaged(j.id, live, err)
		return
	case err != nil:
		s.unreadable(ctx, p, "", err)
		return
	}
	s.nPacks.Add(1)
	s.nPackBytes.Add(j.size - dataEnd) // the index and footer
	if s.meta != nil {
		if entries, err = s.liveEntries(ctx, j.id, entries); err != nil {
			s.failMeta(err)
			return
		}
	}
	s.verifyFrames(ctx, j.id, entries)
}

// addDamaged records a pack whose index cannot be read. With a metadata
// store the files located in it are found through the recipes naming
// them (missing-file: no index lists them), and repair moves them out.
func (s *scrubber) addDamaged(id string, live int64, err error) {
	detail := "its index cannot be read: " + oneLine(err.Error())
	if live > 0 {
		detail += fmt.Sprintf("; the metadata store locates %d stored bytes of files in it", live)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.addLocked(Finding{Kind: KindDamagedPack, Path: layout.Pack(id), Detail: detail})
	s.damaged[id] = &damagedPack{finding: i, live: live}
}

// liveEntries keeps the entries of pack id that files are located at:
// one metadata call per 4096 entries.
func (s *scrubber) liveEntries(ctx context.Context, id string, entries []pack.Entry) ([]pack.Entry, error) {
	ds := make([]digest.Digest, len(entries))
	for i, e := range entries {
		ds[i] = e.Digest
	}
	locs, err := s.locations(ctx, ds)
	if err != nil {
		return nil, err
	}
	out := entries[:0:0]
	for _, e := range entries {
		if locs[e.Digest].Location == (meta.Location{Pack: id, Offset: e.Offset, Length: e.Length}) {
			out = append(out, e)
		}
	}
	s.nDeadFiles.Add(int64(len(entries) - len(out)))
	return out, nil
}

// locations returns the metadata store's entry of each digest, with as
// few calls as its batch size allows.
func (s *scrubber) locations(ctx context.Context, ds []digest.Digest) (map[digest.Digest]meta.FileInfo, error) {
	const batch = 4096
	out := make(map[digest.Digest]meta.FileInfo, len(ds))
	for i := 0; i < len(ds); i += batch {
		var infos []meta.FileInfo
		err := retry(ctx, func() error {
			var err error
			infos, err = s.meta.Files(ctx, ds[i:min(i+batch, len(ds))])
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, fi := range infos {
			out[fi.Digest] = fi
		}
	}
	return out, nil
}

// verifyFrames verifies entries of pack id, streaming the object; a read
// that fails is resumed from the first frame not verified, twice.
func (s *scrubber) verifyFrames(ctx context.Context, id string, entries []pack.Entry) {
	p := layout.Pack(id)
	todo := entries
	var err error
	for attempt := 0; attempt < 3 && len(todo) > 0 && ctx.Err() == nil; attempt++ {
		done := make(map[int64]bool, len(todo))
		var read int64
		read, err = pack.VerifyFrames(ctx, s.d, id, todo, func(e pack.Entry, ferr error) error {
			done[e.Offset] = true
			s.frameChecked(id, e, ferr)
			return ctx.Err()
		})
		s.nPackBytes.Add(read)
		if err == nil || ctx.Err() != nil {
			return
		}
		if errors.Is(err, driver.ErrNotFound) {
			s.nVanished.Add(1) // deleted since the listing: GC, after a compaction
			return
		}
		todo = slices.DeleteFunc(slices.Clone(todo), func(e pack.Entry) bool { return done[e.Offset] })
	}
	if len(todo) == 0 || ctx.Err() != nil {
		return
	}
	s.unreadable(ctx, p, "", err)
	// Listed in an index, so stored: only not verified.
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range todo {
		if k, ok := s.keys.Of(e.Digest); ok {
			s.packSet.add(k)
		}
	}
}

// frameChecked records the outcome of one frame's verification.
func (s *scrubber) frameChecked(id string, e pack.Entry, ferr error) {
	k, ok := s.keys.Of(e.Digest)
	if !ok {
		s.add(Finding{Kind: KindDamagedPack, Path: layout.Pack(id), Offset: e.Offset, Digest: string(e.Digest),
			Detail: fmt.Sprintf("its index names a file by %q, not a digest cairn can verify", e.Digest)})
		return
	}
	s.nFiles.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ferr == nil {
		s.nFileBytes.Add(e.Size)
		s.packSet.add(k)
		return
	}
	reason := oneLine(ferr.Error())
	var fe *pack.FrameError
	if errors.As(ferr, &fe) {
		reason = fe.Reason
	}
	// A copy in a pack is what is read: it outranks a corrupt object of
	// its own (settleCopies).
	if old := s.bad[k]; old == nil || old.loc.IsZero() {
		s.bad[k] = &badFile{d: e.Digest, path: layout.Pack(id), offset: e.Offset,
			loc:     meta.Location{Pack: id, Offset: e.Offset, Length: e.Length},
			corrupt: fmt.Sprintf("its frame at offset %d (%d stored bytes) %s", e.Offset, e.Length, reason)}
	}
}

// settleCopies drops the corrupt copies no pull reads, once every copy was
// verified. With a metadata store, an object of its own is read only for
// a file with no location: one located in a pack is a leftover. Without
// one, which copy a pull reads is not known: a corrupt copy counts only
// when no intact copy was found.
func (s *scrubber) settleCopies(ctx context.Context) error {
	s.mu.Lock()
	var objects []digest.Digest
	for k, bf := range s.bad {
		switch {
		case s.meta == nil && (s.packSet.has(k) || s.objectSet.has(k)):
			delete(s.bad, k)
		case s.meta != nil && bf.loc.IsZero():
			objects = append(objects, bf.d)
		}
	}
	s.mu.Unlock()
	if len(objects) == 0 {
		return nil
	}
	locs, err := s.locations(ctx, objects)
	if err != nil {
		return fmt.Errorf("metadata store: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range objects {
		if !locs[d].Location.IsZero() {
			k, _ := s.keys.Of(d)
			delete(s.bad, k)
		}
	}
	return nil
}
