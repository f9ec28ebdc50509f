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
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// What the files pass says of a file a recipe names.
const (
	fileOK      = iota // stored where it is read from
	fileBad            // corrupt or missing: a badFile
	fileUnknown        // not found where the files pass looked: resolveFiles
)

type fileRef struct {
	k key
	d digest.Digest
}

// recipeUse is a recipe naming files, as a bad file records it.
type recipeUse struct {
	blob    digest.Digest
	intact  bool  // the blob's data is stored and not corrupt
	tarSize int64 // its layer's tar
}

func (s *scrubber) fileState(k key) int {
	s.mu.Lock()
	bf, appeared := s.bad[k], s.appeared[k]
	s.mu.Unlock()
	switch {
	case bf != nil:
		return fileBad
	case appeared || s.packSet.has(k):
		return fileOK
	case s.meta == nil && s.objectSet.has(k):
		return fileOK
	}
	// With a metadata store an object of its own is read only for a file
	// with no location: that takes a look-up.
	return fileUnknown
}

// resolveFiles looks for the files of a recipe that the files pass did
// not find where they are read from, and records the missing ones against
// it. Those stored since the listing (a dedup, a compaction, a repair
// racing the scrub) are not missing. It reports whether any is missing
// or could not be looked for.
func (s *scrubber) resolveFiles(ctx context.Context, fs []fileRef, use recipeUse) bool {
	var missing []*badFile
	broken := false
	var infos map[digest.Digest]meta.FileInfo
	if s.meta != nil {
		ds := make([]digest.Digest, len(fs))
		for i, f := range fs {
			ds[i] = f.d
		}
		var err error
		if infos, err = s.locations(ctx, ds); err != nil {
			s.failMeta(err)
			return true
		}
	}
	byPack := make(map[string][]fileRef)
	for _, f := range fs {
		if loc := infos[f.d].Location; !loc.IsZero() {
			byPack[loc.Pack] = append(byPack[loc.Pack], f)
			continue
		}
		if s.meta != nil && s.objectSet.has(f.k) {
			continue // no location: read from its own object, verified
		}
		p := layout.File(f.d)
		gone, err := s.missingNow(ctx, p)
		switch {
		case err != nil:
			s.unreadable(ctx, p, f.d, err)
			broken = true
		case !gone:
			s.markAppeared(f.k)
		case s.meta == nil:
			missing = append(missing, &badFile{d: f.d, path: p, missing: "not stored: in no pack, and no object of its own"})
		case !infos[f.d].Exists:
			missing = append(missing, &badFile{d: f.d, path: p, missing: "not stored: the metadata store has no entry for it, and it has no object of its own"})
		default:
			missing = append(missing, &badFile{d: f.d, path: p, missing: "not stored: no location in a pack, and no object of its own"})
		}
	}
	ids := make([]string, 0, len(byPack))
	for id := range byPack {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ms, ok := s.checkPacked(ctx, id, byPack[id], infos)
		missing = append(missing, ms...)
		broken = broken || !ok
	}
	if len(missing) == 0 {
		return broken
	}
	// A GC deletes a blob's recipe before its files: a recipe gone since
	// is no witness.
	if gone, err := s.missingNow(ctx, layout.BlobRecipe(use.blob)); err != nil || gone {
		return true
	}
	for _, bf := range missing {
		k, _ := s.keys.Of(bf.d)
		s.noteBad(k, bf, use)
	}
	return true
}

// checkPacked checks files located in pack id (infos has their entries)
// against the pack's object and index, and returns those missing; ok is
// false when the pack could not be read.
func (s *scrubber) checkPacked(ctx context.Context, id string, fs []fileRef, infos map[digest.Digest]meta.FileInfo) (missing []*badFile, ok bool) {
	p := layout.Pack(id)
	s.mu.Lock()
	_, damaged := s.damaged[id]
	s.mu.Unlock()
	why := ""
	var listed map[meta.Location]digest.Digest
	switch {
	case damaged:
		why = "whose index cannot be read"
	default:
		var size int64
		err := retry(ctx, func() error {
			fi, err := s.d.Stat(ctx, p)
			if err == nil {
				size = fi.Size
			}
			return err
		})
		var entries []pack.Entry
		if err == nil {
			err = retry(ctx, func() error {
				var err error
				entries, _, err = pack.ObjectIndex(ctx, s.d, id, size)
				return err
			})
		}
		switch {
		case errors.Is(err, driver.ErrNotFound):
			why = "which is not stored"
		case errors.Is(err, pack.ErrFormat):
			why = "whose index cannot be read"
		case err != nil:
			s.unreadable(ctx, p, "", err)
			return nil, false
		}
		listed = make(map[meta.Location]digest.Digest, len(entries))
		for _, e := range entries {
			listed[meta.Location{Pack: id, Offset: e.Offset, Length: e.Length}] = e.Digest
		}
	}
	var cands []fileRef
	for _, f := range fs {
		if why == "" && listed[infos[f.d].Location] == f.d {
			// Placed in this pack since the files pass looked at it.
			s.markAppeared(f.k)
			continue
		}
		cands = append(cands, f)
	}
	if len(cands) == 0 {
		return nil, true
	}
	// Moved since it was located (a compaction, a repair): look again.
	ds := make([]digest.Digest, len(cands))
	for i, f := range cands {
		ds[i] = f.d
	}
	again, err := s.locations(ctx, ds)
	if err != nil {
		s.failMeta(err)
		return nil, false
	}
	for _, f := range cands {
		loc := infos[f.d].Location
		if again[f.d].Location != loc {
			s.markAppeared(f.k) // the next scrub checks its new place
			continue
		}
		w := why
		if w == "" {
			w = "which its index does not list there"
		}
		missing = append(missing, &badFile{d: f.d, path: p, offset: loc.Offset, loc: loc,
			missing: fmt.Sprintf("not stored: located in pack %s at offset %d (%d stored bytes), %s", id, loc.Offset, loc.Length, w)})
	}
	return missing, true
}

func (s *scrubber) markAppeared(k key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appeared[k] = true
}

// noteBad records that use's recipe names bad file k: nb when k has no
// finding yet.
func (s *scrubber) noteBad(k key, nb *badFile, use recipeUse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bf := s.bad[k]
	if bf == nil {
		if nb == nil {
			return
		}
		bf = nb
		s.bad[k] = bf
	}
	bf.namedBy++
	if !use.intact {
		bf.unservable++
	}
	if bf.example == "" {
		bf.example = use.blob
	}
	if use.intact && bf.source == "" {
		bf.source, bf.sourceTar = use.blob, use.tarSize
	}
}
