package scrub

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/dedup/recompress"
	"github.com/cairn-registry/cairn/internal/digestkey"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/parallel"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// repairStore mends bad dedup files, then corrupt blobs (whose rebuild may
// need those files), and records the file findings with what was done.
func (s *scrubber) repairStore(ctx context.Context) error {
	bad := s.badFiles()
	if s.opts.Repair {
		s.repairFiles(ctx, bad)
		s.repairDamaged(bad)
		s.repairBlobs(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, bf := range bad {
		f := Finding{Kind: KindMissingFile, Path: bf.path, Offset: bf.offset, Digest: string(bf.d), Ref: string(bf.example), Detail: cmp.Or(bf.missing, "not stored")}
		if bf.corrupt != "" {
			f.Kind, f.Detail = KindCorruptFile, bf.corrupt
		}
		switch {
		case bf.namedBy == 0:
			f.Detail += "; no recipe names it"
		case bf.unservable > 0:
			f.Detail += fmt.Sprintf("; named by %d recipes, %d of them of layers without intact data (their pulls fail)", bf.namedBy, bf.unservable)
		default:
			f.Detail += fmt.Sprintf("; named by %d recipes (their layers' intact data still serves pulls)", bf.namedBy)
		}
		f.Repaired, f.Repair = bf.repaired, bf.repair
		s.addLocked(f)
	}
	return ctx.Err()
}

// badFiles returns the bad files in key order.
func (s *scrubber) badFiles() []*badFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]key, 0, len(s.bad))
	for k := range s.bad {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, digestkey.Compare)
	out := make([]*badFile, len(keys))
	for i, k := range keys {
		out[i] = s.bad[k]
	}
	return out
}

// repairFiles writes each bad file anew from a layer with intact data
// that holds it; each such layer is read once for all the files it gives.
// A file read from a pack goes into a new pack, which the metadata store
// then locates it in (the old bytes become dead, for GC to reclaim); one
// without a location (a store from before packs) is replaced as an
// object of its own.
func (s *scrubber) repairFiles(ctx context.Context, bad []*badFile) {
	bySource := make(map[digest.Digest][]*badFile)
	var sources []digest.Digest
	s.mu.Lock()
	packs := s.nPacks.Load() > 0 || len(s.damaged) > 0
	s.mu.Unlock()
	for _, bf := range bad {
		if bf.source == "" {
			bf.repair = "no layer with intact data is known to hold it"
			continue
		}
		// Without a metadata store a file missing from a store that has
		// packs belongs in a pack too: only a corrupt object of its own
		// can be replaced.
		if s.meta == nil && (!bf.loc.IsZero() || (bf.corrupt == "" && packs)) {
			bf.repair = "a file in a pack is rewritten into a new pack, which the metadata store must then locate: " +
				"scrub ran without one (give it the configuration's storage.dedup.metadata)"
			continue
		}
		bf.toPack = !bf.loc.IsZero()
		if _, ok := bySource[bf.source]; !ok {
			sources = append(sources, bf.source)
		}
		bySource[bf.source] = append(bySource[bf.source], bf)
	}
	parallel.For(ctx, len(sources), s.opts.Workers, func(i int) {
		src := sources[i]
		files := bySource[src]
		err := s.restoreFiles(ctx, src, files[0].sourceTar, files)
		for _, bf := range files {
			switch {
			case bf.repaired || bf.repair != "":
			case err != nil:
				bf.repair = fmt.Sprintf("reading layer %s failed: %s", src, oneLine(err.Error()))
			default:
				bf.repair = "layer " + string(src) + " did not hold it after all"
			}
		}
	})
}

// errAllStored ends a disassembly once every file wanted is stored.
var errAllStored = errors.New("scrub: every file wanted is stored")

// restoreFiles disassembles blob src (intact data, uncompressing to
// tarSize bytes) and stores exactly the files wanted: into a new pack, or
// replacing their objects. It marks those it stored repaired (want's
// files are its own: no other goroutine touches them).
func (s *scrubber) restoreFiles(ctx context.Context, src digest.Digest, tarSize int64, want []*badFile) error {
	rs := &replaceStore{files: s.packs.Legacy(), need: make(map[digest.Digest]*badFile), stored: make(map[digest.Digest]bool)}
	for _, bf := range want {
		rs.need[bf.d] = bf
		if bf.toPack && rs.w == nil {
			rs.w = s.packs.NewWriter(0)
		}
	}
	err := s.disassemble(ctx, src, tarSize, rs)
	how := "rewritten from layer " + string(src)
	var packed []digest.Digest
	for d := range rs.stored {
		if bf := rs.need[d]; bf.toPack {
			packed = append(packed, d)
		} else {
			bf.repaired, bf.repair = true, how
		}
	}
	if rs.w == nil {
		return err
	}
	// The files put are the layer's own bytes, hashed: worth keeping
	// even when the disassembly failed later on.
	if ferr := rs.w.Flush(ctx); ferr != nil {
		return cmp.Or(err, ferr)
	}
	// Flush placed each file in the new pack, unless the metadata store
	// has no entry for it (nothing to place).
	locs, lerr := s.locations(ctx, packed)
	if lerr != nil {
		return cmp.Or(err, fmt.Errorf("metadata store: %w", lerr))
	}
	for _, d := range packed {
		bf := rs.need[d]
		if loc := locs[d].Location; !loc.IsZero() && loc != bf.loc {
			bf.repaired, bf.repair = true, how+" into pack "+loc.Pack
		} else {
			bf.repair = "written into a new pack from layer " + string(src) + ", which the metadata store did not locate it in (it has no entry for the file)"
		}
	}
	return err
}

// disassemble reads blob src's intact data through layer.Disassemble into
// rs, until every file rs needs is stored.
func (s *scrubber) disassemble(ctx context.Context, src digest.Digest, tarSize int64, rs *replaceStore) error {
	rc, err := s.d.Reader(ctx, layout.BlobData(src), 0)
	if err != nil {
		return err
	}
	defer rc.Close()
	tr, err := recompress.OpenUncompressed(rc)
	if err != nil {
		return err
	}
	defer tr.Close()
	_, err = layer.Disassemble(ctx, io.LimitReader(tr, tarSize), rs)
	if errors.Is(err, errAllStored) {
		err = nil
	}
	return err
}

// replaceStore is the FileStore a repairing disassembly writes through: it
// takes the files needed and writes them into a new pack (w) or replaces
// their objects of their own.
type replaceStore struct {
	files  *layer.DriverStore
	w      *pack.Writer // nil: no file needs a pack
	mu     sync.Mutex
	need   map[digest.Digest]*badFile
	stored map[digest.Digest]bool
}

func (r *replaceStore) Has(_ context.Context, d digest.Digest) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.stored) == len(r.need) {
		return false, errAllStored
	}
	return r.need[d] == nil || r.stored[d], nil
}

// Put is called with bytes Disassemble hashed to d itself.
func (r *replaceStore) Put(ctx context.Context, d digest.Digest, size int64, body io.Reader) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	if r.need[d].toPack {
		err = r.w.Put(ctx, d, size, body) // a Writer is not safe for concurrent use
	} else {
		err = r.files.Replace(ctx, d, size, body)
	}
	if err != nil {
		return err
	}
	r.stored[d] = true
	return nil
}

func (r *replaceStore) Open(context.Context, digest.Digest) (io.ReadCloser, error) {
	return nil, errors.New("scrub: the repair store is write-only")
}

// repairBlobs rebuilds each corrupt blob that has a recipe over its data.
func (s *scrubber) repairBlobs(ctx context.Context) {
	s.mu.Lock()
	cs := make([]corruptBlob, 0, len(s.corrupt))
	for _, c := range s.corrupt {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	slices.SortFunc(cs, func(a, b corruptBlob) int { return digestkey.Compare(a.k, b.k) })
	parallel.For(ctx, len(cs), s.opts.Workers, func(i int) {
		c := cs[i]
		if s.blobs.flags(c.k)&bRecipe == 0 {
			s.repairedAt(c.finding, false, "no recipe to rebuild it from")
			return
		}
		s.mu.Lock()
		needMeta := s.needMeta[c.k]
		s.mu.Unlock()
		if needMeta {
			s.repairedAt(c.finding, false, "its recipe names files in packs, which only the metadata store locates: scrub ran without one")
			return
		}
		if err := s.rewriteBlob(ctx, c.digest); err != nil {
			s.repairedAt(c.finding, false, "rebuild from its recipe failed: "+oneLine(err.Error()))
			return
		}
		s.repairedAt(c.finding, true, "rebuilt from its recipe")
	})
}

// rewriteBlob rebuilds blob d from its recipe into a temporary file and,
// once the bytes hash to d, moves it over the data.
func (s *scrubber) rewriteBlob(ctx context.Context, d digest.Digest) error {
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := layout.TmpPromote(d, hex.EncodeToString(rnd[:])) // as dedup's promote: swept by GC if left
	fw, err := s.d.Writer(ctx, tmp, false)
	if err != nil {
		return err
	}
	var n atomic.Int64
	got, _, err := s.rebuildDigest(ctx, d, fw, &n)
	if err == nil && got != d {
		err = fmt.Errorf("rebuilt bytes hash to %s", got)
	}
	return driver.Publish(ctx, s.d, fw, tmp, layout.BlobData(d), err)
}

// repairDamaged says, for each damaged pack, what the file repairs did:
// the files located in it that recipes name were rewritten into new packs
// with the other bad files, and once no file is located in it GC deletes
// it as it does any empty pack. Scrub cannot tell other files apart
// without its index, but the metadata store counts their bytes (Live).
func (s *scrubber) repairDamaged(bad []*badFile) {
	s.mu.Lock()
	damaged := maps.Clone(s.damaged)
	s.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(damaged)) {
		dp := damaged[id]
		var n, fixed int
		var moved int64
		for _, bf := range bad {
			if bf.loc.Pack == id {
				n++
				if bf.repaired {
					fixed++
					moved += bf.loc.Length
				}
			}
		}
		switch {
		case s.meta == nil:
			s.repairedAt(dp.finding, false, "moving the files located in it out needs the metadata store: scrub ran without one")
		case n == 0:
			s.repairedAt(dp.finding, false, "no recipe names a file located in it")
		case moved >= dp.live:
			s.repairedAt(dp.finding, true, fmt.Sprintf("its %d files were rewritten into new packs: no file is located in it, and GC deletes it", fixed))
		default:
			s.repairedAt(dp.finding, false, fmt.Sprintf("%d files (%d of its %d live bytes) were rewritten into new packs; "+
				"the rest belong to files no recipe with intact data names", fixed, moved, dp.live))
		}
	}
}
