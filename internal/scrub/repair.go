package scrub

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/digestkey"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/parallel"
)

// repairStore mends bad dedup files, then corrupt blobs (whose rebuild may
// need those files), and records the file findings with what was done.
func (s *scrubber) repairStore(ctx context.Context) error {
	bad := s.badFiles()
	if s.opts.Repair {
		s.repairFiles(ctx, bad)
		s.repairBlobs(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, bf := range bad {
		f := Finding{Kind: KindMissingFile, Path: bf.path, Digest: string(bf.d), Ref: string(bf.example), Detail: "not stored"}
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
func (s *scrubber) repairFiles(ctx context.Context, bad []*badFile) {
	bySource := make(map[digest.Digest][]*badFile)
	var sources []digest.Digest
	for _, bf := range bad {
		if bf.source == "" {
			bf.repair = "no layer with intact data is known to hold it"
			continue
		}
		if _, ok := bySource[bf.source]; !ok {
			sources = append(sources, bf.source)
		}
		bySource[bf.source] = append(bySource[bf.source], bf)
	}
	parallel.For(ctx, len(sources), s.opts.Workers, func(i int) {
		src := sources[i]
		files := bySource[src]
		stored, err := s.restoreFiles(ctx, src, files[0].sourceTar, files)
		for _, bf := range files {
			switch {
			case stored[bf.d]:
				bf.repaired, bf.repair = true, "rewritten from layer "+string(src)
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
// tarSize bytes) and stores exactly the files wanted, replacing what is
// stored under their digests.
func (s *scrubber) restoreFiles(ctx context.Context, src digest.Digest, tarSize int64, want []*badFile) (map[digest.Digest]bool, error) {
	rs := &replaceStore{files: s.files, need: make(map[digest.Digest]bool), stored: make(map[digest.Digest]bool)}
	for _, bf := range want {
		rs.need[bf.d] = true
	}
	rc, err := s.d.Reader(ctx, layout.BlobData(src), 0)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr, done, err := uncompressed(rc)
	if err != nil {
		return nil, err
	}
	defer done()
	_, err = layer.Disassemble(ctx, io.LimitReader(tr, tarSize), rs)
	if errors.Is(err, errAllStored) {
		err = nil
	}
	return rs.stored, err
}

// replaceStore is the FileStore a repairing disassembly writes through: it
// takes the files needed and replaces whatever is stored under them.
type replaceStore struct {
	files  *layer.DriverStore
	mu     sync.Mutex
	need   map[digest.Digest]bool
	stored map[digest.Digest]bool
}

func (r *replaceStore) Has(_ context.Context, d digest.Digest) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.stored) == len(r.need) {
		return false, errAllStored
	}
	return !r.need[d] || r.stored[d], nil
}

// Put is called with bytes Disassemble hashed to d itself.
func (r *replaceStore) Put(ctx context.Context, d digest.Digest, size int64, body io.Reader) error {
	if err := r.files.Replace(ctx, d, size, body); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stored[d] = true
	return nil
}

func (r *replaceStore) Open(context.Context, digest.Digest) (io.ReadCloser, error) {
	return nil, errors.New("scrub: the repair store is write-only")
}

// uncompressed opens the tar inside a layer blob by its magic bytes: gzip
// (one member or several), zstd, or a plain tar.
func uncompressed(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 3 && magic[0] == 0x1f && magic[1] == 0x8b && magic[2] == 8:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, err
		}
		return &gzipTolerant{zr: zr}, func() { zr.Close() }, nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}

// gzipTolerant ends the stream at bytes after the last member that are
// not another member, as dedup does (its recipes keep them verbatim).
type gzipTolerant struct{ zr *gzip.Reader }

func (g *gzipTolerant) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	if errors.Is(err, gzip.ErrHeader) {
		err = io.EOF
	}
	return n, err
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
	if err == nil {
		err = fw.Commit(ctx)
	}
	if err != nil {
		fw.Cancel(ctx)
		return err
	}
	fw.Close()
	if err := s.d.Move(ctx, tmp, layout.BlobData(d)); err != nil {
		s.d.Delete(ctx, tmp) // only our temporary copy
		return err
	}
	return nil
}
