package dedup

import (
	"time"

	"github.com/cairn-registry/cairn/internal/arc"
	"github.com/cairn-registry/cairn/internal/iowatch"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"

	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/dedup/recompress"
	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// ErrRebuildMismatch means a rebuild did not reproduce the blob: storage
// lost or changed a piece. The layer's GET fails rather than serve wrong
// bytes.
var ErrRebuildMismatch = errors.New("dedup: rebuilt blob does not match its digest")

// recipe returns the parsed recipe file of blob d; an error wrapping
// driver.ErrNotFound when d has none.
func (s *Source) recipe(ctx context.Context, d digest.Digest) (*Recipe, error) {
	if r, ok := s.recipes.get(d); ok {
		return r, nil
	}
	b, err := s.d.GetContent(ctx, layout.BlobRecipe(d))
	if err != nil {
		return nil, err
	}
	r, err := decodeRecipe(d, b)
	if err != nil {
		return nil, err
	}
	s.recipes.add(d, r, int64(len(b)))
	return r, nil
}

// BlobSize implements registry.DedupSource.
func (s *Source) BlobSize(ctx context.Context, d digest.Digest) (int64, error) {
	r, err := s.recipe(ctx, d)
	if err != nil {
		return 0, err
	}
	return r.Size, nil
}

// Rebuilt implements registry.DedupSource.
func (s *Source) Rebuilt(ctx context.Context, d digest.Digest) bool {
	if s.states == nil {
		return false
	}
	_, state, err := s.states.GetLayer(ctx, d)
	return err == nil && state == meta.StateDeduplicated
}

// OpenBlob implements registry.DedupSource: it streams the rebuilt blob
// from offset. Concurrent GETs of one layer share one rebuild, which also
// fills the preconstruct cache; a Range from the middle waits for the
// rebuild to get there, or reads the cached copy. The last byte is held
// back until the rebuild has matched the digest, so a failed rebuild never
// reads as a complete blob.
func (s *Source) OpenBlob(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	r, err := s.recipe(ctx, d)
	if err != nil {
		return nil, err
	}
	if s.disk == nil || !s.disk.Warm(string(d)) {
		if err := s.preflight(ctx, r); err != nil {
			return nil, err
		}
	}
	if s.disk == nil {
		// No cache directory: rebuild for this reader alone.
		pr, pw := io.Pipe()
		go func() {
			w := &holdLast{w: &skipWriter{w: pw, skip: offset}, pass: r.Size - 1}
			err := s.restore(ctx, r, w, allCores)
			if err == nil {
				err = w.flush()
			}
			pw.CloseWithError(err)
		}()
		return pr, nil
	}
	// A GET that joins a rebuild already under way (predicted, or another
	// client's) counts as a hit: it does not start one.
	warm := s.disk.Warm(string(d))
	rc, hit, err := s.disk.Open(ctx, string(d), r.Size, offset, func(ctx context.Context, w io.Writer) error {
		return s.restore(ctx, r, w, allCores)
	})
	if err != nil {
		return nil, err
	}
	s.metrics.CacheLookup(CachePreconstruct, hit || warm)
	return rc, nil
}

// ErrFilesMissing means a layer cannot be rebuilt: the metadata, known
// complete, locates some of its files nowhere (cairn scrub tells more).
var ErrFilesMissing = errors.New("dedup: files of the layer are missing from storage")

// preflight checks, before a rebuild starts and so before any header is
// sent, that the metadata answers and locates every file of r: a GET that
// would fail at its first unlocated file is answered 503 (the metadata is
// down, or being rebuilt: come back) or 500 (files lost) instead of a 200
// cut short. A layer whose files the metadata does not locate while it
// claims to be complete sets off an index check (Redis flushed under a
// running node).
func (s *Source) preflight(ctx context.Context, r *Recipe) error {
	n, err := s.files.Unlocated(ctx, distinctFiles(&r.Tar))
	if err != nil {
		return fmt.Errorf("%w: dedup metadata store: %w", registry.ErrUnavailable, err)
	}
	if n == 0 {
		return nil
	}
	if s.reindexing.Load() {
		return fmt.Errorf("%w: layer %s (%d files not located yet)", ErrReindexing, r.Digest, n)
	}
	if s.checkIndex != nil && s.checkIndex(ctx) {
		return fmt.Errorf("%w: layer %s (%d files not located yet)", ErrReindexing, r.Digest, n)
	}
	s.metrics.DedupRebuildFailed("missing_file")
	return fmt.Errorf("%w: layer %s: %d files located nowhere", ErrFilesMissing, r.Digest, n)
}

// CachedBlob implements registry.DedupSource: intact blobs prefetched into
// memory for a predicted pull, also while the prefetch still reads them.
func (s *Source) CachedBlob(d digest.Digest, offset int64) io.ReadCloser {
	if s.mem == nil {
		return nil
	}
	return s.mem.Open(string(d), offset)
}

// rebuild writes blob r.Digest to w: the tar is assembled from the file
// store (reading files ahead in parallel) in one goroutine while the
// recompressor runs in this one. The digest and size are checked at the
// end; a mismatch returns ErrRebuildMismatch after the bytes were written,
// so callers must not publish them (the preconstruct cache discards them).
// It never writes more than r.Size bytes.
func (s *Source) rebuild(ctx context.Context, r *Recipe, w io.Writer, procs int) error {
	_, err := s.rebuildChecking(ctx, r, w, nil, procs)
	return err
}

// rebuildChecking is rebuild that, given the original blob, checks the
// recipe's restart points against it (recompress.Check) and returns the
// compression recipe without those that did not hold. procs bounds the
// cores the recompression uses (0: all).
func (s *Source) rebuildChecking(ctx context.Context, r *Recipe, w io.Writer, original io.ReaderAt, procs int) (recompress.Recipe, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Add(1)
	var asmErr error
	// The files stored as parses hand their tokens to the recompression
	// (recompress, "Copies"): a check finds where they agree with the
	// blob's, a restore follows them there. A restore whose recipe lists
	// no copies (a producer not followed, or no file's parse agreed) has
	// nothing to follow, and skips decoding the tokens.
	// A check compares every file's parse with the blob; a restore reads
	// the tokens of the files its copies name, and only the bytes of the
	// others.
	var parses *recompress.Parses
	var seen layer.PayloadFunc
	var want func(i int) bool
	if r.Compression.ParseLevel() > 0 && (original != nil || r.Compression.Follows()) {
		keep := original != nil && s.keepOriginal
		parses = &recompress.Parses{KeepHeaders: keep, KeepSpans: keep, Release: s.files.ReleaseTokens}
		want = func(int) bool { return true }
		if original == nil {
			srcs := r.Compression.CopySources()
			want = func(i int) bool { return srcs[i] }
		}
		seen = func(i int, off int64, rc io.Reader) {
			switch p := rc.(type) {
			case *pack.Parsed:
				if len(p.Tokens) > 0 {
					parses.Add(i, off, p.Size(), p.Level, p.Tokens, p.Marks)
				}
			case *pack.ParsedStream:
				if want(i) {
					p.Follow(func(first int, rel, size int64, tokens []deflate.Token, marks []deflate.Mark) {
						parses.AddPiece(i, first, off+rel, size, p.Level, tokens, marks)
					})
				}
			}
		}
	}
	go func() {
		defer wg.Done()
		asmErr = layer.AssembleWith(ctx, pw, &r.Tar, storeErrs{s.files, want}, seen)
		pw.CloseWithError(asmErr)
	}()
	v := r.Digest.Verifier()
	cw := &iowatch.Writer{W: io.MultiWriter(&sizeCap{w: w, left: r.Size}, v)}
	kept := r.Compression
	var err error
	if original != nil {
		kept, err = recompress.CheckFollowing(cw, r.Compression, pr, original, parses)
	} else {
		err = recompress.RebuildFollowing(cw, r.Compression, pr, procs, parses)
	}
	if err == nil {
		// The tar must end exactly where the recipe's members do.
		var one [1]byte
		if n, _ := io.ReadFull(pr, one[:]); n > 0 {
			err = fmt.Errorf("%w: tar longer than the recipe's members", ErrRebuildMismatch)
		}
	}
	if err == nil {
		// A rebuild that read all its input before the context ended
		// (a segment's) does not see it end: the caller gave up all the
		// same.
		err = ctx.Err()
	}
	pr.CloseWithError(errors.New("dedup: rebuild ended"))
	cancel()
	wg.Wait()
	if asmErr != nil && (err == nil || errors.Is(err, io.ErrUnexpectedEOF) || isStorageErr(asmErr)) {
		err = asmErr
	}
	if err != nil {
		return kept, fmt.Errorf("dedup: rebuild %s: %w", r.Digest, err)
	}
	if cw.N != r.Size || !v.Verified() {
		return kept, fmt.Errorf("%w: %s: rebuilt %d bytes, want %d", ErrRebuildMismatch, r.Digest, cw.N, r.Size)
	}
	return kept, nil
}

// Reasons a restore failed, as the rebuild failures metric labels them.
const (
	failMissingFile = "missing_file" // a unique file is not in the store
	failCorruptFile = "corrupt_file" // a unique file does not match its digest
	failMismatch    = "mismatch"     // the recipe does not reproduce the blob
	failStorage     = "storage"      // the store could not be read
	failOther       = "other"
)

// restore is rebuild for a layer served from its recipe (a GET, a
// predicted pull, a promotion): with the intact copy gone, a failure is a
// layer that cannot be served, and the client only sees a response cut
// short. So it is logged at ERROR, naming the layer and the file at fault,
// and counted. A reader that went away or a stopping process is not a
// failure of the layer, nor is an output that fails (every reader of a
// fill the cache stepped aside from went away).
func (s *Source) restore(ctx context.Context, r *Recipe, w io.Writer, procs int) error {
	out := &watchedWriter{w: w}
	err := s.rebuild(ctx, r, out, procs)
	if err == nil || out.err != nil || ctx.Err() != nil {
		return err
	}
	reason, file := rebuildFailure(err)
	s.metrics.DedupRebuildFailed(reason)
	attrs := []any{"layer", r.Digest, "reason", reason}
	if file != "" {
		attrs = append(attrs, "file", file)
	}
	s.log.Error("dedup: rebuild of a deduplicated layer failed", append(attrs, "err", err)...)
	return err
}

// rebuildFailure tells why a rebuild failed and which file, if one is at
// fault.
func rebuildFailure(err error) (reason string, file digest.Digest) {
	var fe *layer.FileError
	if errors.As(err, &fe) {
		file = fe.Digest
	}
	switch {
	case errors.Is(err, layer.ErrCorruptFile):
		return failCorruptFile, file
	case file != "" && errors.Is(err, driver.ErrNotFound):
		return failMissingFile, file
	case errors.Is(err, ErrRebuildMismatch), errors.Is(err, layer.ErrMismatch), errors.Is(err, recompress.ErrMismatch):
		return failMismatch, file
	case file != "" || isStorageErr(err):
		return failStorage, file
	}
	return failOther, file
}

// watchedWriter remembers whether writing to w failed.
type watchedWriter struct {
	w   io.Writer
	err error
}

func (o *watchedWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil {
		o.err = err
	}
	return n, err
}

// sizeCap fails a rebuild that runs past the blob's size before the extra
// bytes reach w.
type sizeCap struct {
	w    io.Writer
	left int64
}

func (c *sizeCap) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, fmt.Errorf("%w: rebuild runs past the blob's size", ErrRebuildMismatch)
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// holdLast passes the first pass bytes to w and keeps the rest (one byte
// of a rebuild, which sizeCap bounds) until flush: a reader never gets the
// whole blob before the rebuild verified it.
type holdLast struct {
	w    io.Writer
	pass int64
	held []byte
}

func (h *holdLast) Write(p []byte) (int, error) {
	k := min(int64(len(p)), max(h.pass, 0))
	if k > 0 {
		if _, err := h.w.Write(p[:k]); err != nil {
			return 0, err
		}
		h.pass -= k
	}
	h.held = append(h.held, p[k:]...)
	return len(p), nil
}

func (h *holdLast) flush() error {
	if len(h.held) == 0 {
		return nil
	}
	_, err := h.w.Write(h.held)
	h.held = nil
	return err
}

// storeErrs marks file store failures as storage errors, so that a layer
// whose files cannot be read right now is retried rather than given up. A
// corrupt file is no passing failure: it is left unmarked, as when its
// corruption shows while it is read.
type storeErrs struct {
	*pack.Store
	// parses, when set, says which files' parse frames are streamed
	// with their tokens.
	parses func(i int) bool
}

func (s storeErrs) Open(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	rc, err := s.Store.Open(ctx, d)
	return rc, markStorage(err)
}

func (s storeErrs) Stream(ctx context.Context, files []layer.File) (layer.Payloads, error) {
	var ps layer.Payloads
	var err error
	if s.parses != nil {
		ps, err = s.Store.StreamParses(ctx, files, s.parses)
	} else {
		ps, err = s.Store.Stream(ctx, files)
	}
	if err != nil {
		return nil, markStorage(err)
	}
	return payloadErrs{ps}, nil
}

// payloadErrs is storeErrs for a stream's payloads.
type payloadErrs struct{ layer.Payloads }

func (p payloadErrs) Next() (io.ReadCloser, error) {
	rc, err := p.Payloads.Next()
	return rc, markStorage(err)
}

func markStorage(err error) error {
	if err != nil && !errors.Is(err, layer.ErrCorruptFile) {
		return storageErr{err}
	}
	return err
}

// promote writes the rebuilt blob back as intact data (selective mode, a
// layer turned hot), through a temp path and an atomic move.
func (w *Worker) promote(ctx context.Context, l digest.Digest) error {
	r, err := w.recipe(ctx, l)
	if err != nil {
		return err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := layout.TmpPromote(l, hex.EncodeToString(rnd[:]))
	fw, err := w.d.Writer(ctx, tmp, false)
	if err != nil {
		return err
	}
	return driver.Publish(ctx, w.d, fw, tmp, layout.BlobData(l), w.restore(ctx, r, fw, allCores))
}

// hot reports whether l was pulled often enough lately to keep its intact
// copy in selective mode.
func (w *Worker) hot(ctx context.Context, l digest.Digest) (bool, error) {
	n, err := w.meta.LayerPulls(ctx, l, time.Now().Add(-w.opts.HotWindow))
	if err != nil {
		return false, err
	}
	return n >= w.opts.HotPulls, nil
}

// skipWriter drops the first skip bytes (a Range start without a cache).
type skipWriter struct {
	w    io.Writer
	skip int64
}

func (s *skipWriter) Write(p []byte) (int, error) {
	n := len(p)
	if s.skip >= int64(n) {
		s.skip -= int64(n)
		return n, nil
	}
	p = p[s.skip:]
	s.skip = 0
	if _, err := s.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}

// recipeCache keeps parsed recipes, bounded by their file sizes.
type recipeCache struct {
	mu  sync.Mutex
	arc *arc.Cache[*Recipe]
}

func newRecipeCache(capacity int64) *recipeCache {
	return &recipeCache{arc: arc.New[*Recipe](capacity, nil)}
}

func (c *recipeCache) get(d digest.Digest) (*Recipe, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.arc.Get(string(d))
}

func (c *recipeCache) remove(d digest.Digest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.arc.Remove(string(d))
}

func (c *recipeCache) add(d digest.Digest, r *Recipe, cost int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.arc.Add(string(d), r, cost)
}
