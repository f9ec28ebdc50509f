package pack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
	"github.com/cairn-registry/cairn/internal/iowatch"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Index is what a Store needs of the metadata store.
type Index interface {
	Placer
	Files(ctx context.Context, digests []digest.Digest) ([]meta.FileInfo, error)
}

// Options tune a Store. Zero values take the defaults noted.
type Options struct {
	// PackSize is the size a pack is ended at. Default 32 MiB.
	PackSize int64
	// MaxSpan bounds one coalesced read, and so what one read ahead holds
	// in memory. Default 4 MiB.
	MaxSpan int64
	// MaxGap is the largest run of unneeded bytes read through to join two
	// files into one read. Default 1 MiB: on an object store a request
	// costs a round trip (20 ms first byte on S3), in which a connection
	// moves about that much.
	MaxGap int64
	// Inflight is how many reads one stream keeps going at once. Default 4.
	Inflight int
}

// Defaults of Options.
const (
	DefaultPackSize = 32 << 20
	DefaultMaxSpan  = 4 << 20
	DefaultMaxGap   = 1 << 20
	DefaultInflight = 4
)

func (o Options) withDefaults() Options {
	if o.PackSize <= 0 {
		o.PackSize = DefaultPackSize
	}
	if o.MaxSpan <= 0 {
		o.MaxSpan = DefaultMaxSpan
	}
	if o.MaxGap < 0 {
		o.MaxGap = 0
	} else if o.MaxGap == 0 {
		o.MaxGap = DefaultMaxGap
	}
	if o.Inflight <= 0 {
		o.Inflight = DefaultInflight
	}
	return o
}

var (
	_ layer.FileStore = (*Store)(nil)
	_ layer.Streamer  = (*Store)(nil)
)

// Store is dedup's FileStore: files in packs, located by the metadata
// store, and files of its own under cairn/files for what was stored before
// packs. Without an Index it reads only the latter.
type Store struct {
	d      driver.Driver
	idx    Index // nil: per-file objects only
	legacy *layer.DriverStore
	opts   Options
	log    *slog.Logger
	small  *zstd.Encoder  // EncodeAll is safe for concurrent use
	smallD *zstd.Decoder  // DecodeAll is safe for concurrent use
	encs   sync.Pool      // *zstd.Encoder for large files
	decs   layer.Decoders // for large files
	// parseDecs keeps the decoders of small parse frames: their tables
	// (~120 KB) outweigh most small files, and a layer has thousands.
	parseDecs sync.Pool // *deflate.Decoder
	// tokens lends the room parse frames' tokens are decoded into, which
	// a rebuild gives back (ReleaseTokens) once it passed them.
	tokens deflate.TokenPool
	// legacyState caches whether cairn/files holds anything (legacyYes,
	// legacyNo; 0: not known yet). Nothing writes there any more, so once
	// empty it stays empty, and a file without a location costs no request.
	legacyState atomic.Int32
}

const (
	legacyYes = 1
	legacyNo  = 2
)

// mayHaveLegacy reports whether files stored one object each may exist:
// one listing, the first time.
func (s *Store) mayHaveLegacy(ctx context.Context) (bool, error) {
	switch s.legacyState.Load() {
	case legacyYes:
		return true, nil
	case legacyNo:
		return false, nil
	}
	if s.idx == nil {
		return true, nil // nothing else can locate a file
	}
	names, err := s.d.List(ctx, layout.FilesDir)
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return false, fmt.Errorf("pack: listing %s: %w", layout.FilesDir, err)
	}
	if len(names) > 0 {
		s.legacyState.Store(legacyYes)
		return true, nil
	}
	s.legacyState.Store(legacyNo)
	return false, nil
}

// openLegacy opens file d stored as an object of its own, when such
// objects may exist; otherwise it fails as not found at once.
func (s *Store) openLegacy(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	ok, err := s.mayHaveLegacy(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("pack: file %s: %w", d, driver.PathNotFoundError{Path: layout.File(d)})
	}
	return s.legacy.Open(ctx, d)
}

// MayHaveLegacy reports whether the store may hold files stored one
// object each (before packs), which no location names.
func (s *Store) MayHaveLegacy(ctx context.Context) (bool, error) { return s.mayHaveLegacy(ctx) }

// NewStore returns a Store over d; idx may be nil.
func NewStore(d driver.Driver, idx Index, opts Options, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	legacy, err := layer.NewDriverStore(d)
	if err != nil {
		return nil, err
	}
	small, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	// Small files only: a frame claiming more is corrupt, not a reason
	// to allocate.
	smallD, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(2*smallFile), zstd.WithDecoderConcurrency(0))
	if err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	return &Store{d: d, idx: idx, legacy: legacy, opts: opts.withDefaults(), log: log, small: small, smallD: smallD}, nil
}

// Legacy is the store of per-file objects (cairn/files) that Store reads
// files without a location from.
func (s *Store) Legacy() *layer.DriverStore { return s.legacy }

// Options returns the store's options, defaults filled in.
func (s *Store) Options() Options { return s.opts }

// locate returns each digest's location (zero: none recorded), with as
// few metadata calls as the batch size allows.
func (s *Store) locate(ctx context.Context, ds []digest.Digest) (map[digest.Digest]meta.Location, error) {
	out := make(map[digest.Digest]meta.Location, len(ds))
	if s.idx == nil {
		return out, nil
	}
	const batch = 4096
	for i := 0; i < len(ds); i += batch {
		infos, err := s.idx.Files(ctx, ds[i:min(i+batch, len(ds))])
		if err != nil {
			return nil, fmt.Errorf("pack: locate files: %w", err)
		}
		for _, fi := range infos {
			if !fi.Location.IsZero() {
				out[fi.Digest] = fi.Location
			}
		}
	}
	return out, nil
}

// Unlocated counts the files of ds that nothing locates: while the
// metadata is rebuilt from storage, a restore needing one would fail
// mid-stream. Files stored one object each have no location, so a store
// that may hold them counts none (their reads find out).
func (s *Store) Unlocated(ctx context.Context, ds []digest.Digest) (int, error) {
	if legacy, err := s.mayHaveLegacy(ctx); err != nil || legacy {
		return 0, err
	}
	locs, err := s.locate(ctx, ds)
	if err != nil {
		return 0, err
	}
	return len(ds) - len(locs), nil
}

// Has implements layer.FileStore: a located file is known from the
// metadata store; only one without a location costs a request.
func (s *Store) Has(ctx context.Context, d digest.Digest) (bool, error) {
	locs, err := s.locate(ctx, []digest.Digest{d})
	if err != nil {
		return false, err
	}
	if _, ok := locs[d]; ok {
		return true, nil
	}
	if ok, err := s.mayHaveLegacy(ctx); err != nil || !ok {
		return false, err
	}
	return s.legacy.Has(ctx, d)
}

// Put implements layer.FileStore: the file goes into a pack of its own.
// Writers of many files use NewWriter.
func (s *Store) Put(ctx context.Context, d digest.Digest, size int64, r io.Reader) error {
	w := s.NewWriter(0)
	if err := w.Put(ctx, d, size, r); err != nil {
		return err
	}
	return w.Flush(ctx)
}

// Open implements layer.FileStore.
func (s *Store) Open(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	locs, err := s.locate(ctx, []digest.Digest{d})
	if err != nil {
		return nil, err
	}
	loc, ok := locs[d]
	if !ok {
		return s.openLegacy(ctx, d)
	}
	return s.openAt(ctx, d, loc, -1, false)
}

// openAt reads one file of size bytes (< 0: unknown) at loc with a ranged
// read of its own: a small one whole, a larger one streamed. A small parse
// frame is handed out with its tokens as a *Parsed when tokens are asked;
// a larger one is always a *ParsedStream, whose tokens go to a Follow.
func (s *Store) openAt(ctx context.Context, d digest.Digest, loc meta.Location, size int64, tokens bool) (io.ReadCloser, error) {
	if size >= 0 && size <= smallFile {
		frame, err := s.readRange(ctx, loc.Pack, loc.Offset, loc.Length)
		if err != nil {
			return nil, err
		}
		return s.decodeSmall(d, frame, size, tokens)
	}
	rc, err := s.d.ReadRange(ctx, layout.Pack(loc.Pack), loc.Offset, loc.Length)
	if err != nil {
		return nil, fmt.Errorf("pack: read %s from %s: %w", d, loc.Pack, err)
	}
	return s.decodeStream(d, rc, size)
}

// readRange reads n bytes at off of pack id, all of them.
func (s *Store) readRange(ctx context.Context, id string, off, n int64) ([]byte, error) {
	rc, err := s.d.ReadRange(ctx, layout.Pack(id), off, n)
	if err != nil {
		return nil, fmt.Errorf("pack: read %s: %w", id, err)
	}
	defer rc.Close()
	buf := make([]byte, n)
	src := iowatch.ErrReader{R: rc}
	if k, err := io.ReadFull(&src, buf); err != nil {
		if src.Err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: pack %s ends %d bytes into %d+%d", layer.ErrCorruptFile, id, k, off, n)
		}
		return nil, fmt.Errorf("pack: read %s: %w", id, err)
	}
	return buf, nil
}

// decodeSmall decompresses one frame of a file of size bytes (a parse
// frame with its tokens, if asked).
func (s *Store) decodeSmall(d digest.Digest, frame []byte, size int64, tokens bool) (io.ReadCloser, error) {
	if isParse(frame) {
		dec, ok := s.parseDecs.Get().(*deflate.Decoder)
		if !ok {
			dec = &deflate.Decoder{}
		}
		defer s.parseDecs.Put(dec) // what it hands out is the caller's (decodeParse)
		return decodeParse(dec, &s.tokens, d, frame, size, tokens)
	}
	out, err := s.smallD.DecodeAll(frame, make([]byte, 0, size))
	if err != nil {
		return nil, fmt.Errorf("pack: file %s: %w: %w", d, layer.ErrCorruptFile, err)
	}
	return newWhole(out), nil
}

// ReleaseTokens takes back the tokens of a parse (Parsed.Tokens, or a
// piece a ParsedStream handed its follower) for the parses decoded after
// it: the caller and everyone it shared them with are done with them.
func (s *Store) ReleaseTokens(ts []deflate.Token) { s.tokens.Put(ts) }

// decodeStream decompresses a frame of a file of size bytes (< 0: not
// known) as it is read from rc; a parse frame is handed out as a
// *ParsedStream.
func (s *Store) decodeStream(d digest.Digest, rc io.ReadCloser, size int64) (io.ReadCloser, error) {
	src := &iowatch.ErrReader{R: rc}
	br := bufio.NewReaderSize(src, 64<<10)
	if head, err := br.Peek(len(parseMagic) + 1); isParse(head) {
		br.Discard(len(head))
		return openParsedStream(d, src, br, rc, size, int(head[len(parseMagic)]), &s.tokens), nil
	} else if err != nil && src.Err != nil {
		rc.Close()
		return nil, fmt.Errorf("pack: file %s: %w", d, src.Err)
	}
	out, err := s.decs.Open(struct {
		io.Reader
		io.Closer
	}{br, rc})
	if err != nil {
		return nil, fmt.Errorf("pack: file %s: %w", d, err)
	}
	return out, nil
}
