package gcs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strconv"

	"cloud.google.com/go/storage"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// How a file grows across writers, given that GCS objects are immutable:
//
//   - A writer that starts a file uploads to the file's own key. Close and
//     Commit both finalise that upload, so a closed, uncommitted file is an
//     ordinary object holding what was written so far (as on a filesystem).
//   - An appending writer uploads its bytes to a part object beside the file
//     (key + "~part~" + random; '~' is no path character, so List and Walk
//     never show it). Close and Commit compose file+part into the file, on
//     the server without moving data, then delete the part.
//   - A composite object has at most 1024 components. Before an append
//     would pass that, the file is rewritten once as a plain object (read
//     and uploaded again); a chunked push pays that every ~1000 chunks.
//   - Cancel aborts the upload in progress (nothing unfinalised is ever
//     visible) and deletes the file, including earlier writers' bytes.
const (
	partInfix = "~part~"
	// componentsMeta carries the driver's own component count: emulators
	// (fake-gcs-server) do not report componentCount, and the limit must
	// hold, and be testable, there too.
	componentsMeta = "cairn-components"
)

// writer is a driver.FileWriter. It is used by one goroutine at a time.
type writer struct {
	d         *Driver
	path, key string
	// ctx is the Writer call's. The upload is bound to it anyway, and Close
	// (an io.Closer, without a ctx of its own) composes under it.
	ctx   context.Context
	abort context.CancelFunc // ends the upload's context
	up    *storage.Writer
	// part is the part object's key when appending, else "".
	part string
	// baseGen and baseParts describe the file being appended to.
	baseGen, baseParts int64
	size, written      int64
	opened             bool // up has seen a Write
	staged             bool // from StageWriter: Close is Cancel, which deletes nothing
	state              driver.WriterState
}

var _ driver.FileWriter = (*writer)(nil)

var _ driver.Stager = (*Driver)(nil)

// StageWriter implements driver.Stager: a resumable upload to the file's
// key, finalised only by Commit; Cancel and Close abort it.
func (d *Driver) StageWriter(ctx context.Context, path string) (driver.FileWriter, error) {
	key, err := d.fileKey(path)
	if err != nil {
		return nil, err
	}
	w, err := d.newWriter(ctx, path, key, false)
	if err != nil {
		return nil, err
	}
	w.staged = true
	return w, nil
}

func (d *Driver) newWriter(ctx context.Context, path, key string, append bool) (*writer, error) {
	w := &writer{d: d, path: path, key: key, ctx: ctx}
	target := key
	if append {
		attrs, err := d.bucket.Object(key).Attrs(ctx)
		if err != nil {
			return nil, fail("append", path, err)
		}
		w.size, w.baseGen, w.baseParts = attrs.Size, attrs.Generation, components(attrs)
		w.part = key + partInfix + rand.Text()
		target = w.part
	}
	uctx, abort := context.WithCancel(ctx)
	w.abort = abort
	w.up = d.bucket.Object(target).NewWriter(uctx)
	w.up.ContentType = contentType
	w.up.ChunkSize = d.chunkSize
	return w, nil
}

// components returns how many components the object is made of (a plain
// object is one).
func components(attrs *storage.ObjectAttrs) int64 {
	n := max(attrs.ComponentCount, 1)
	if m, err := strconv.ParseInt(attrs.Metadata[componentsMeta], 10, 64); err == nil {
		n = max(n, m)
	}
	return n
}

func (w *writer) mustBeOpen(op string) error {
	if w.state != driver.WriterOpen {
		return fmt.Errorf("gcs: %s %s: writer is %s", op, w.path, w.state)
	}
	return nil
}

// Write implements io.Writer.
func (w *writer) Write(p []byte) (int, error) {
	if err := w.mustBeOpen("write"); err != nil {
		return 0, err
	}
	w.opened = true
	n, err := w.up.Write(p)
	w.size += int64(n)
	w.written += int64(n)
	if err != nil {
		return n, fail("write", w.path, err)
	}
	return n, nil
}

// Size implements driver.FileWriter.
func (w *writer) Size() int64 { return w.size }

// Close finalises what was written so that a later appending writer can
// continue it. Closing again, or after Commit or Cancel, does nothing.
func (w *writer) Close() error {
	return w.state.CloseStaged(w.staged,
		func() error { return w.Cancel(w.ctx) },
		func() error { return w.finish(w.ctx) })
}

// Commit implements driver.FileWriter.
func (w *writer) Commit(ctx context.Context) error {
	return w.state.Commit(func() error { return w.mustBeOpen("commit") }, func() error { return w.finish(ctx) })
}

// finish finalises the upload and, when appending, composes the part into
// the file.
func (w *writer) finish(ctx context.Context) error {
	defer w.abort()
	if w.part == "" {
		if err := w.up.Close(); err != nil {
			return fail("write", w.path, err)
		}
		return nil
	}
	if w.written == 0 {
		// The file already holds everything; drop the empty part upload.
		w.abort()
		if w.opened {
			_ = w.up.Close() // waits for the upload to end; its error is the abort
		}
		return nil
	}
	if err := w.up.Close(); err != nil {
		return fail("write", w.path, err)
	}
	err := w.compose(ctx)
	if derr := w.d.bucket.Object(w.part).Delete(ctx); derr != nil && !errors.Is(derr, storage.ErrObjectNotExist) {
		err = errors.Join(err, fmt.Errorf("gcs: delete part %s: %w", w.part, derr))
	}
	return err
}

// compose replaces the file with file+part. The file is named at the
// generation the writer started from: if anyone replaced it since, the
// compose fails rather than append to someone else's file.
func (w *writer) compose(ctx context.Context) error {
	gen, parts := w.baseGen, w.baseParts
	if parts+1 > w.d.maxComponents {
		var err error
		if gen, err = w.flatten(ctx, gen); err != nil {
			return err
		}
		parts = 1
	}
	obj := w.d.bucket.Object(w.key)
	c := obj.ComposerFrom(obj.Generation(gen), w.d.bucket.Object(w.part))
	c.ContentType = contentType
	c.Metadata = map[string]string{componentsMeta: strconv.FormatInt(parts+1, 10)}
	if _, err := c.Run(ctx); err != nil {
		return fail("append", w.path, err)
	}
	return nil
}

// flatten rewrites generation gen of the file as a plain object and returns
// the new generation.
func (w *writer) flatten(ctx context.Context, gen int64) (int64, error) {
	obj := w.d.bucket.Object(w.key)
	r, err := obj.Generation(gen).NewReader(ctx)
	if err != nil {
		return 0, fail("append: flatten", w.path, err)
	}
	defer r.Close()
	uctx, abort := context.WithCancel(ctx)
	defer abort()
	up := obj.If(storage.Conditions{GenerationMatch: gen}).NewWriter(uctx)
	up.ContentType = contentType
	up.ChunkSize = w.d.chunkSize
	if _, err := io.Copy(up, r); err != nil {
		abort() // the upload must not finalise a truncated copy
		_ = up.Close()
		return 0, fail("append: flatten", w.path, err)
	}
	if err := up.Close(); err != nil {
		return 0, fail("append: flatten", w.path, err)
	}
	return up.Attrs().Generation, nil
}

// Cancel implements driver.FileWriter: it aborts the upload and deletes the
// file, including what earlier writers wrote. It works on an open or closed
// writer.
func (w *writer) Cancel(ctx context.Context) error {
	switch w.state {
	case driver.WriterCancelled:
		return nil
	case driver.WriterCommitted:
		return fmt.Errorf("gcs: cancel %s: writer is committed", w.path)
	case driver.WriterOpen:
		w.abort()
		if w.opened {
			// Waits for the upload to end; its error is the abort.
			_ = w.up.Close()
		}
	}
	w.state = driver.WriterCancelled
	if w.staged {
		return nil // nothing was finalised; the file at the key is not this writer's
	}
	if err := w.d.bucket.Object(w.key).Delete(ctx); err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
		return fail("cancel", w.path, err)
	}
	return nil
}
