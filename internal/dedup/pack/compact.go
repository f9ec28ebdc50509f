package pack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// ReadIndex returns the entries of pack id whose index begins at dataEnd
// (the record's Size): one ranged read of the rest of the object.
func (s *Store) ReadIndex(ctx context.Context, id string, dataEnd int64) ([]Entry, error) {
	if dataEnd < int64(len(header)) {
		return nil, fmt.Errorf("pack %s: %w: index at %d", id, ErrFormat, dataEnd)
	}
	tail, err := readTail(ctx, s.d, id, dataEnd, maxIndex+footerSize+1)
	if err != nil {
		return nil, err
	}
	entries, off, err := parseTail(id, tail, dataEnd+int64(len(tail)))
	if err == nil && off != dataEnd {
		err = fmt.Errorf("pack %s: %w: index at %d, recorded %d", id, ErrFormat, off, dataEnd)
	}
	return entries, err
}

// ObjectIndex returns the entries of the pack object id of size bytes (as a
// listing found it) and where its index begins, from the object alone: two
// ranged reads, the footer and then the index. Scrub and tests read packs
// this way, without the metadata store.
func ObjectIndex(ctx context.Context, d driver.Driver, id string, size int64) ([]Entry, int64, error) {
	if size < int64(len(header))+footerSize {
		return nil, 0, fmt.Errorf("pack %s: %w: %d bytes", id, ErrFormat, size)
	}
	ft, err := readTail(ctx, d, id, size-footerSize, footerSize)
	if err != nil {
		return nil, 0, err
	}
	off, _, _, err := parseFooter(ft, size)
	if err != nil {
		return nil, 0, fmt.Errorf("pack %s: %w", id, err)
	}
	tail, err := readTail(ctx, d, id, off, size-off)
	if err != nil {
		return nil, 0, err
	}
	entries, _, err := parseTail(id, tail, size)
	return entries, off, err
}

// readTail reads up to n bytes of pack id from off.
func readTail(ctx context.Context, d driver.Driver, id string, off, n int64) ([]byte, error) {
	rc, err := d.ReadRange(ctx, layout.Pack(id), off, n)
	if err != nil {
		return nil, fmt.Errorf("pack: read %s: %w", id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, n))
	if err != nil {
		return nil, fmt.Errorf("pack: read %s: %w", id, err)
	}
	return b, nil
}

// parseTail decodes the index and footer that end a pack of size bytes
// (tail: its bytes from the index on) and returns the entries and where
// the index begins.
func parseTail(id string, tail []byte, size int64) ([]Entry, int64, error) {
	if len(tail) < footerSize {
		return nil, 0, fmt.Errorf("pack %s: %w: no footer", id, ErrFormat)
	}
	off, n, sum, err := parseFooter(tail[len(tail)-footerSize:], size)
	if err != nil {
		return nil, 0, fmt.Errorf("pack %s: %w", id, err)
	}
	b := tail[len(tail)-footerSize-int(n) : len(tail)-footerSize]
	if crc32Sum(b) != sum {
		return nil, 0, fmt.Errorf("pack %s: %w: index checksum", id, ErrFormat)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxIndex*4), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, 0, err
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(b, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("pack %s: %w: index: %w", id, ErrFormat, err)
	}
	entries, err := decodeIndex(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("pack %s: %w", id, err)
	}
	for _, e := range entries {
		if e.Offset+e.Length > off {
			return nil, 0, fmt.Errorf("pack %s: %w: entry %s past the index", id, ErrFormat, e.Digest)
		}
	}
	return entries, off, nil
}

// Compaction is what Compact did.
type Compaction struct {
	Packs int   // packs whose live files were moved
	Files int64 // files moved (placed in a new pack)
	Bytes int64 // their stored bytes
}

// Compact moves the live files of packs (sparse ones, as GC picks them)
// into new packs, copying their stored frames as they are, in each pack's
// order. Each move is conditional on the file still being where the pack's
// index says (meta Placement.From): a file dropped, or moved by another
// writer meanwhile, is not moved back. The old packs keep their bytes; their
// Live falls to 0 and GC deletes them after its delay, so a restore that
// located a file in one finishes first (or finds it gone and looks again).
// A pack whose object is damaged is skipped and named in the error.
func (s *Store) Compact(ctx context.Context, packs []meta.PackInfo) (Compaction, error) {
	var c Compaction
	if s.idx == nil {
		return c, nil
	}
	w := s.NewWriter(0)
	defer w.Abort(ctx)
	var bad []error
	for _, p := range packs {
		if err := s.copyLive(ctx, w, p); err != nil {
			if ctx.Err() != nil {
				return c, ctx.Err()
			}
			bad = append(bad, err)
			continue
		}
		c.Packs++
	}
	err := w.Flush(ctx)
	c.Files, c.Bytes = w.placed, w.placedBytes
	if err != nil {
		return c, err
	}
	if len(bad) > 0 {
		return c, fmt.Errorf("pack: compaction skipped %d packs: first: %w", len(bad), bad[0])
	}
	return c, nil
}

// copyLive appends the live files of pack p to w.
func (s *Store) copyLive(ctx context.Context, w *Writer, p meta.PackInfo) error {
	entries, err := s.ReadIndex(ctx, p.ID, p.Size)
	if err != nil {
		return err
	}
	ds := make([]digest.Digest, len(entries))
	for i, e := range entries {
		ds[i] = e.Digest
	}
	now, err := s.locate(ctx, ds)
	if err != nil {
		return err
	}
	// The files still located at the entry, in the pack's order.
	var live []layer.File
	at := make(map[digest.Digest]meta.Location)
	byDigest := make(map[digest.Digest]Entry)
	for _, e := range entries {
		loc := meta.Location{Pack: p.ID, Offset: e.Offset, Length: e.Length}
		if now[e.Digest] != loc || at[e.Digest] == loc {
			continue
		}
		live = append(live, layer.File{Digest: e.Digest, Size: e.Size})
		at[e.Digest], byDigest[e.Digest] = loc, e
	}
	spans, of, _ := plan(live, at, s.opts.MaxSpan, s.opts.MaxGap)
	prev := -1
	for i, f := range live {
		e, loc, k := byDigest[f.Digest], at[f.Digest], of[i]
		if k != prev && prev >= 0 {
			spans[prev].buf = nil // done with: memory stays within one span
		}
		prev = k
		sp := spans[k]
		if sp.large {
			err = s.copyFrame(ctx, w, p.ID, e, loc)
		} else {
			if sp.buf == nil {
				if sp.buf, err = s.readRange(ctx, p.ID, sp.off, sp.n); err != nil {
					return err
				}
			}
			err = w.putRaw(ctx, e, bytes.NewReader(sp.buf[loc.Offset-sp.off:][:loc.Length]), loc)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// copyFrame streams one large stored file from pack id into w.
func (s *Store) copyFrame(ctx context.Context, w *Writer, id string, e Entry, loc meta.Location) error {
	rc, err := s.d.ReadRange(ctx, layout.Pack(id), loc.Offset, loc.Length)
	if err != nil {
		return fmt.Errorf("pack: read %s: %w", id, err)
	}
	defer rc.Close()
	return w.putRaw(ctx, e, rc, loc)
}

// Migrate moves the files of a layer that are objects of their own (under
// cairn/files, written before packs) into packs in the layer's order,
// copying their stored frames as they are, then deletes those objects in
// one call. A restore that located such a file before the move and finds
// its object gone looks again (stream.relocate). Files without an entry
// (released and dropped) are left alone.
func (s *Store) Migrate(ctx context.Context, files []layer.File) (Compaction, error) {
	var c Compaction
	if s.idx == nil {
		return c, nil
	}
	infos, err := s.idx.Files(ctx, distinct(files))
	if err != nil {
		return c, fmt.Errorf("pack: migrate: %w", err)
	}
	todo := make(map[digest.Digest]bool)
	for _, fi := range infos {
		if fi.Exists && fi.Location.IsZero() && !fi.Tombstoned {
			todo[fi.Digest] = true
		}
	}
	if len(todo) == 0 {
		return c, nil
	}
	w := s.NewWriter(0)
	defer w.Abort(ctx)
	var copied []digest.Digest
	for _, f := range files {
		if !todo[f.Digest] {
			continue
		}
		delete(todo, f.Digest)
		err := s.copyObject(ctx, w, f)
		if errors.Is(err, driver.ErrNotFound) {
			continue // nothing to move: the file will be written anew
		}
		if err != nil {
			return c, err
		}
		copied = append(copied, f.Digest)
	}
	if err := w.Flush(ctx); err != nil {
		return c, err
	}
	c.Files, c.Bytes = w.placed, w.placedBytes
	// Only placed files lose their object: look them up again.
	infos, err = s.idx.Files(ctx, copied)
	if err != nil {
		return c, fmt.Errorf("pack: migrate: %w", err)
	}
	var paths []string
	for _, fi := range infos {
		if !fi.Location.IsZero() {
			paths = append(paths, layout.File(fi.Digest))
		}
	}
	if len(paths) > 0 {
		if _, err := s.d.DeleteFiles(ctx, paths); err != nil {
			return c, fmt.Errorf("pack: migrate: deleting moved objects: %w", err)
		}
	}
	return c, nil
}

// copyObject appends a per-file object's stored frame to w: one GET for a
// small file, a Stat and a streamed GET for a large one.
func (s *Store) copyObject(ctx context.Context, w *Writer, f layer.File) error {
	p := layout.File(f.Digest)
	if f.Size <= smallFile {
		b, err := s.d.GetContent(ctx, p)
		if err != nil {
			return fmt.Errorf("pack: migrate %s: %w", f.Digest, err)
		}
		return w.putRaw(ctx, Entry{Digest: f.Digest, Length: int64(len(b)), Size: f.Size}, bytes.NewReader(b), meta.Location{})
	}
	fi, err := s.d.Stat(ctx, p)
	if err != nil {
		return fmt.Errorf("pack: migrate %s: %w", f.Digest, err)
	}
	rc, err := s.d.Reader(ctx, p, 0)
	if err != nil {
		return fmt.Errorf("pack: migrate %s: %w", f.Digest, err)
	}
	defer rc.Close()
	return w.putRaw(ctx, Entry{Digest: f.Digest, Length: fi.Size, Size: f.Size}, rc, meta.Location{})
}
