package pack

import (
	"context"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
	"github.com/cairn-registry/cairn/internal/iowatch"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Placer is what a Writer needs of the metadata store.
type Placer interface {
	BeginPack(ctx context.Context, id string) error
	PlaceFiles(ctx context.Context, id string, size int64, files []meta.Placement) ([]bool, error)
}

// Writer appends files to packs of about its target size, one pack at a
// time; Flush ends the current pack and makes its files readable. It is
// not safe for concurrent use: each layer's ingest (or each compaction)
// has its own.
type Writer struct {
	s       *Store
	target  int64
	id      string
	fw      driver.FileWriter
	out     *iowatch.Writer // counts the pack's bytes so far
	entries []Entry
	from    []meta.Location // per entry: the condition of a moving placement
	// placed and placedBytes count the files Flush recorded, for reports.
	placed, placedBytes int64
	// parseLevel, when set, stores files of MinParseFile bytes and more
	// as parse frames at that deflate level.
	parseLevel int
}

// KeepParses makes w store each file of MinParseFile bytes or more as its
// parse at a deflate level (4–9; see parse.go; the dedup worker passes
// ParseLevel), for the layers whose compression follows them, whichever
// layer writes the file. Other levels (0: none) keep zstd frames.
func (w *Writer) KeepParses(level int) {
	if deflate.Searchable(level) && level > 0 {
		w.parseLevel = level
	}
}

// NewWriter returns a Writer filling packs of about target bytes (0: the
// store's default).
func (s *Store) NewWriter(target int64) *Writer {
	if target <= 0 {
		target = s.opts.PackSize
	}
	return &Writer{s: s, target: target}
}

// Has reports false: a Writer is only handed the files a caller decided to
// write (layer.Sink).
func (w *Writer) Has(context.Context, digest.Digest) (bool, error) { return false, nil }

// Put compresses size bytes of r (which the caller vouches hash to d) into
// the current pack, starting one if none is open, and ends the pack once
// it reaches the target size.
func (w *Writer) Put(ctx context.Context, d digest.Digest, size int64, r io.Reader) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("pack: put: %w", err)
	}
	if err := w.open(ctx); err != nil {
		return err
	}
	off := w.out.N
	var err error
	switch {
	case w.parseLevel > 0 && size >= MinParseFile:
		err = streamParse(w.out, w.parseLevel, size, r)
	case size <= smallFile:
		err = w.putSmall(size, r)
	default:
		err = w.putStream(size, r)
	}
	if err != nil {
		w.Abort(ctx)
		return fmt.Errorf("pack: put %s: %w", d, err)
	}
	w.entries = append(w.entries, Entry{Digest: d, Offset: off, Length: w.out.N - off, Size: size})
	w.from = append(w.from, meta.Location{})
	return w.flushFull(ctx)
}

// smallFile is the largest file compressed in memory in one call.
const smallFile = 4 << 20

func (w *Writer) putSmall(size int64, r io.Reader) error {
	buf := make([]byte, size+1)
	n, err := io.ReadFull(r, buf)
	if (err != io.ErrUnexpectedEOF && err != io.EOF) || int64(n) != size {
		return fmt.Errorf("%d bytes given, want %d (%v)", n, size, err)
	}
	_, err = w.out.Write(w.s.small.EncodeAll(buf[:n], nil))
	return err
}

func (w *Writer) putStream(size int64, r io.Reader) error {
	enc, _ := w.s.encs.Get().(*zstd.Encoder)
	if enc == nil {
		var err error
		if enc, err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1)); err != nil {
			return err
		}
	}
	defer func() { enc.Reset(nil); w.s.encs.Put(enc) }()
	enc.Reset(w.out)
	n, err := io.Copy(enc, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("%d bytes given, want %d", n, size)
	}
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	return err
}

// putRaw appends a file's stored bytes (e.Length of them, read from
// frame) as they are: compaction copies frames without recompressing them.
// from is where the file is now, the condition of its move.
func (w *Writer) putRaw(ctx context.Context, e Entry, frame io.Reader, from meta.Location) error {
	if err := w.open(ctx); err != nil {
		return err
	}
	off := w.out.N
	n, err := io.Copy(w.out, io.LimitReader(frame, e.Length))
	if err == nil && n != e.Length {
		err = fmt.Errorf("%w: %d of %d stored bytes", layer.ErrCorruptFile, n, e.Length)
	}
	if err != nil {
		w.Abort(ctx)
		return fmt.Errorf("pack: copy %s: %w", e.Digest, err)
	}
	w.entries = append(w.entries, Entry{Digest: e.Digest, Offset: off, Length: e.Length, Size: e.Size})
	w.from = append(w.from, from)
	return w.flushFull(ctx)
}

func (w *Writer) flushFull(ctx context.Context) error {
	if w.out.N < w.target {
		return nil
	}
	return w.Flush(ctx)
}

// open starts a pack if none is open: recorded first, so that GC treats
// the object as being written rather than as an orphan.
func (w *Writer) open(ctx context.Context) error {
	if w.fw != nil {
		return nil
	}
	id, err := NewID()
	if err != nil {
		return err
	}
	if err := w.s.idx.BeginPack(ctx, id); err != nil {
		return fmt.Errorf("pack: begin %s: %w", id, err)
	}
	fw, err := w.s.d.Writer(ctx, layout.Pack(id), false)
	if err != nil {
		return fmt.Errorf("pack: begin %s: %w", id, err)
	}
	w.id, w.fw, w.out, w.entries, w.from = id, fw, &iowatch.Writer{W: fw}, w.entries[:0], w.from[:0]
	if _, err := w.out.Write([]byte(header)); err != nil {
		w.Abort(ctx)
		return fmt.Errorf("pack: begin %s: %w", id, err)
	}
	return nil
}

// Flush ends the current pack, if one is open: it writes the index and
// footer, commits the object and records its files' locations. A Flush
// that fails leaves none of the pack's files readable from it.
func (w *Writer) Flush(ctx context.Context) error {
	if w.fw == nil {
		return nil
	}
	id := w.id
	idx := w.s.small.EncodeAll(encodeIndex(w.entries), nil)
	off := w.out.N
	_, err := w.out.Write(idx)
	if err == nil {
		_, err = w.out.Write(footer(off, idx))
	}
	if err == nil {
		err = w.fw.Commit(ctx)
	}
	if err != nil {
		w.Abort(ctx)
		return fmt.Errorf("pack: write %s: %w", id, err)
	}
	err = w.fw.Close()
	// The record's size is where the index begins: Live compares with the
	// bytes files can occupy, so that a small pack's index never reads as
	// dead space (and is never compacted for it).
	size := off
	w.fw, w.out = nil, nil
	if err != nil {
		return fmt.Errorf("pack: write %s: %w", id, err)
	}
	ps := make([]meta.Placement, len(w.entries))
	for i, e := range w.entries {
		ps[i] = meta.Placement{Digest: e.Digest, Offset: e.Offset, Length: e.Length, From: w.from[i]}
	}
	placed, err := w.s.idx.PlaceFiles(ctx, id, size, ps)
	if err != nil {
		// The object stays unreferenced: GC removes it after the delay.
		return fmt.Errorf("pack: place %s: %w", id, err)
	}
	for i, ok := range placed {
		if ok {
			w.placed++
			w.placedBytes += ps[i].Length
		}
	}
	w.s.log.Debug("dedup: pack written", "pack", id, "bytes", size, "files", len(ps))
	return nil
}

// Abort drops the pack being written, if any. Its record stays, empty,
// for GC.
func (w *Writer) Abort(ctx context.Context) {
	if w.fw == nil {
		return
	}
	w.fw.Cancel(ctx)
	w.fw.Close()
	w.fw, w.out = nil, nil
}
