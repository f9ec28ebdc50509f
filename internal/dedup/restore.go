package dedup

import (
	"github.com/cairn-registry/cairn/internal/iocount"
	"github.com/cairn-registry/cairn/internal/layout"

	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/cache"
	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/recompress"
)

// ErrRebuildMismatch means a rebuild did not reproduce the blob: storage
// lost or changed a piece. The layer's GET fails rather than serve wrong
// bytes.
var ErrRebuildMismatch = errors.New("dedup: rebuilt blob does not match its digest")

// recipe returns the parsed recipe file of blob d; an error wrapping
// driver.ErrNotFound when d has none.
func (e *Engine) recipe(ctx context.Context, d digest.Digest) (*Recipe, error) {
	if r, ok := e.recipes.get(d); ok {
		return r, nil
	}
	b, err := e.d.GetContent(ctx, layout.BlobRecipe(d))
	if err != nil {
		return nil, err
	}
	r, err := decodeRecipe(d, b)
	if err != nil {
		return nil, err
	}
	e.recipes.add(d, r, int64(len(b)))
	return r, nil
}

// BlobSize implements registry.DedupSource.
func (e *Engine) BlobSize(ctx context.Context, d digest.Digest) (int64, error) {
	r, err := e.recipe(ctx, d)
	if err != nil {
		return 0, err
	}
	return r.Size, nil
}

// OpenBlob implements registry.DedupSource: it streams the rebuilt blob
// from offset. Concurrent GETs of one layer share one rebuild, which also
// fills the preconstruct cache; a Range from the middle waits for the
// rebuild to get there, or reads the cached copy.
func (e *Engine) OpenBlob(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	r, err := e.recipe(ctx, d)
	if err != nil {
		return nil, err
	}
	if e.disk == nil {
		// No cache directory: rebuild for this reader alone.
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(e.rebuild(ctx, r, &skipWriter{w: pw, skip: offset})) }()
		return pr, nil
	}
	// A GET that joins a rebuild already under way (predicted, or another
	// client's) counts as a hit: it does not start one.
	warm := e.disk.Warm(string(d))
	rc, hit, err := e.disk.Open(ctx, string(d), r.Size, offset, func(ctx context.Context, w io.Writer) error {
		return e.rebuild(ctx, r, w)
	})
	if err != nil {
		return nil, err
	}
	e.metrics.CacheLookup(CachePreconstruct, hit || warm)
	return rc, nil
}

// CachedBlob implements registry.DedupSource: intact blobs prefetched into
// memory for a predicted pull.
func (e *Engine) CachedBlob(d digest.Digest, offset int64) io.ReadCloser {
	if e.mem == nil {
		return nil
	}
	b, ok := e.mem.Get(string(d))
	if !ok || offset > int64(len(b)) {
		return nil
	}
	return io.NopCloser(bytes.NewReader(b[offset:]))
}

// rebuild writes blob r.Digest to w: the tar is assembled from the file
// store (reading files ahead in parallel) in one goroutine while the
// recompressor runs in this one. The digest and size are checked at the
// end; a mismatch returns ErrRebuildMismatch after the bytes were written,
// so callers must not publish them (the preconstruct cache discards them).
func (e *Engine) rebuild(ctx context.Context, r *Recipe, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Add(1)
	var asmErr error
	go func() {
		defer wg.Done()
		asmErr = layer.Assemble(ctx, pw, &r.Tar, storeErrs{e.files})
		pw.CloseWithError(asmErr)
	}()
	v := r.Digest.Verifier()
	cw := &iocount.Writer{W: io.MultiWriter(w, v)}
	err := recompress.Rebuild(cw, r.Compression, pr)
	if err == nil {
		// The tar must end exactly where the recipe's members do.
		var one [1]byte
		if n, _ := io.ReadFull(pr, one[:]); n > 0 {
			err = fmt.Errorf("%w: tar longer than the recipe's members", ErrRebuildMismatch)
		}
	}
	pr.CloseWithError(errors.New("dedup: rebuild ended"))
	cancel()
	wg.Wait()
	if asmErr != nil && (err == nil || errors.Is(err, io.ErrUnexpectedEOF) || isStorageErr(asmErr)) {
		err = asmErr
	}
	if err != nil {
		return fmt.Errorf("dedup: rebuild %s: %w", r.Digest, err)
	}
	if cw.N != r.Size || !v.Verified() {
		return fmt.Errorf("%w: %s: rebuilt %d bytes, want %d", ErrRebuildMismatch, r.Digest, cw.N, r.Size)
	}
	return nil
}

// storeErrs marks file store failures as storage errors, so that a layer
// whose files cannot be read right now is retried rather than given up.
type storeErrs struct{ layer.FileStore }

func (s storeErrs) Open(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	rc, err := s.FileStore.Open(ctx, d)
	if err != nil {
		return nil, storageErr{err}
	}
	return rc, nil
}

// promote writes the rebuilt blob back as intact data (selective mode, a
// layer turned hot), through a temp path and an atomic move.
func (e *Engine) promote(ctx context.Context, l digest.Digest) error {
	r, err := e.recipe(ctx, l)
	if err != nil {
		return err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := layout.TmpPromote(l, hex.EncodeToString(rnd[:]))
	fw, err := e.d.Writer(ctx, tmp, false)
	if err != nil {
		return err
	}
	if err := e.rebuild(ctx, r, fw); err != nil {
		fw.Cancel(ctx)
		return err
	}
	if err := fw.Commit(ctx); err != nil {
		fw.Cancel(ctx)
		return err
	}
	if err := fw.Close(); err != nil {
		return err
	}
	if err := e.d.Move(ctx, tmp, layout.BlobData(l)); err != nil {
		e.d.Delete(ctx, tmp)
		return err
	}
	return nil
}

// hot reports whether l was pulled often enough lately to keep its intact
// copy in selective mode.
func (e *Engine) hot(ctx context.Context, l digest.Digest) (bool, error) {
	n, err := e.meta.LayerPulls(ctx, l, e.now().Add(-e.opts.HotWindow))
	if err != nil {
		return false, err
	}
	return n >= e.opts.HotPulls, nil
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
	arc *cache.ARC[*Recipe]
}

func newRecipeCache(capacity int64) *recipeCache {
	return &recipeCache{arc: cache.NewARC[*Recipe](capacity, nil)}
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
