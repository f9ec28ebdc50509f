package pack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// span is one read of a stream: a range of a pack holding one or more of
// the files in a row, or one file without a location (a per-file object).
type span struct {
	pack   string // "": a per-file object
	off, n int64
	// large: too big to hold in memory; read as its file is reached.
	large bool
	file  int           // a per-file object's index in the stream's files
	done  chan struct{} // closed once buf or err is set
	buf   []byte        // the range's bytes, or a per-file object's content
	err   error
}

// repeatMax bounds the bytes of files a stream keeps to hand out again:
// a layer often holds one small file many times over (licences, empty
// modules), and its later copies should cost no read.
const (
	repeatMax     = 64 << 20
	repeatFileMax = 1 << 20
)

// reuse is how plan marks a file handed out from the copy kept of its
// first occurrence.
const reuse = -1

// plan groups files (in order) into spans: a file joins the span before it
// when it lies in the same pack at or after the span's end, no more than
// maxGap past it, and the span stays within maxSpan. Files in layer order
// were written to packs in that order, so a layer of new files reads as a
// few long ranges; files shared with older layers break the run. A small
// file listed again is kept from its first occurrence (of[i] == reuse),
// within repeatMax bytes; keep counts the occurrences still to come.
func plan(files []layer.File, locs map[digest.Digest]meta.Location, maxSpan, maxGap int64) (spans []*span, of []int, keep map[digest.Digest]int) {
	of = make([]int, len(files))
	count := make(map[digest.Digest]int, len(files))
	for _, f := range files {
		count[f.Digest]++
	}
	keep = make(map[digest.Digest]int)
	var kept int64
	for i, f := range files {
		if n, ok := keep[f.Digest]; ok {
			keep[f.Digest] = n + 1
			of[i] = reuse
			continue
		}
		if count[f.Digest] > 1 && f.Size <= repeatFileMax && kept+f.Size <= repeatMax {
			keep[f.Digest] = 0
			kept += f.Size
		}
		loc, ok := locs[f.Digest]
		if !ok {
			spans = append(spans, &span{n: f.Size, large: f.Size > maxSpan, file: i})
			of[i] = len(spans) - 1
			continue
		}
		if k := len(spans); k > 0 {
			sp := spans[k-1]
			end := sp.off + sp.n
			if sp.pack == loc.Pack && !sp.large && f.Size <= smallFile && loc.Offset >= end && loc.Offset-end <= maxGap &&
				loc.Offset+loc.Length-sp.off <= maxSpan {
				sp.n = loc.Offset + loc.Length - sp.off
				of[i] = k - 1
				continue
			}
		}
		spans = append(spans, &span{pack: loc.Pack, off: loc.Offset, n: loc.Length, large: loc.Length > maxSpan || f.Size > smallFile})
		of[i] = len(spans) - 1
	}
	for _, sp := range spans {
		sp.done = make(chan struct{})
	}
	return spans, of, keep
}

// distinct returns the digests of files, each once, in order.
func distinct(files []layer.File) []digest.Digest {
	seen := make(map[digest.Digest]bool, len(files))
	var ds []digest.Digest
	for _, f := range files {
		if !seen[f.Digest] {
			seen[f.Digest] = true
			ds = append(ds, f.Digest)
		}
	}
	return ds
}

// Stream implements layer.Streamer: one metadata call locates every file,
// then the spans are read ahead, at most Inflight at once, and the files
// handed out in order.
func (s *Store) Stream(ctx context.Context, files []layer.File) (layer.Payloads, error) {
	locs, err := s.locate(ctx, distinct(files))
	if err != nil {
		return nil, err
	}
	spans, of, keep := plan(files, locs, s.opts.MaxSpan, s.opts.MaxGap)
	ctx, cancel := context.WithCancel(ctx)
	st := &stream{s: s, ctx: ctx, cancel: cancel, files: files, locs: locs, spans: spans, of: of,
		keep: keep, kept: make(map[digest.Digest][]byte), slots: make(chan struct{}, s.opts.Inflight)}
	st.wg.Add(1)
	go st.readAhead()
	return st, nil
}

// stream hands out a Stream's files. Each span read ahead holds a slot
// until the reader has moved past its last file, so memory stays within
// Inflight spans.
type stream struct {
	s      *Store
	ctx    context.Context // the stream's own, ended by Close
	cancel context.CancelFunc
	files  []layer.File
	locs   map[digest.Digest]meta.Location
	spans  []*span
	of     []int // of[i] is the span of files[i], or reuse
	// keep counts, per file listed again, the occurrences still to hand
	// out from kept.
	keep  map[digest.Digest]int
	kept  map[digest.Digest][]byte
	slots chan struct{}
	wg    sync.WaitGroup
	next  int // the next file to hand out
	freed int // spans before this one have given back their slot
}

// readAhead starts the reads of the spans in order, each when a slot is
// free. Large spans are not read ahead: their file streams when reached.
func (st *stream) readAhead() {
	defer st.wg.Done()
	for _, sp := range st.spans {
		if sp.large {
			close(sp.done)
			continue
		}
		select {
		case st.slots <- struct{}{}:
		case <-st.ctx.Done():
			return
		}
		st.wg.Add(1)
		go func() {
			defer st.wg.Done()
			defer close(sp.done)
			sp.buf, sp.err = st.read(sp)
		}()
	}
}

// read fetches a span that is not large.
func (st *stream) read(sp *span) ([]byte, error) {
	if sp.pack != "" {
		return st.s.readRange(st.ctx, sp.pack, sp.off, sp.n)
	}
	// A per-file object, decompressed as it is read.
	rc, err := st.s.openLegacy(st.ctx, st.files[sp.file].Digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, sp.n+1))
}

// Next implements layer.Payloads.
func (st *stream) Next() (io.ReadCloser, error) {
	if st.next >= len(st.files) {
		return nil, fmt.Errorf("pack: stream: all %d files handed out", len(st.files))
	}
	i := st.next
	st.next++
	f, k := st.files[i], st.of[i]
	if k == reuse {
		b := st.kept[f.Digest]
		if st.keep[f.Digest]--; st.keep[f.Digest] == 0 {
			delete(st.kept, f.Digest)
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	rc, err := st.open(f, k)
	if n, ok := st.keep[f.Digest]; ok && n > 0 && err == nil {
		// Kept as read: Assemble checks every occurrence's digest.
		b, err := io.ReadAll(io.LimitReader(rc, repeatFileMax+1))
		rc.Close()
		if err != nil {
			return nil, err
		}
		st.kept[f.Digest] = b
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	return rc, err
}

// open reads file f, which lies in span k.
func (st *stream) open(f layer.File, k int) (io.ReadCloser, error) {
	st.free(k)
	sp := st.spans[k]
	select {
	case <-sp.done:
	case <-st.ctx.Done():
		return nil, st.ctx.Err()
	}
	loc, located := st.locs[f.Digest]
	var (
		rc  io.ReadCloser
		err error
	)
	switch {
	case sp.large && located:
		rc, err = st.s.openAt(st.ctx, f.Digest, loc, -1)
	case sp.large:
		rc, err = st.s.openLegacy(st.ctx, f.Digest)
	case sp.err != nil:
		err = sp.err
	case located:
		rc, err = st.s.decodeSmall(f.Digest, sp.buf[loc.Offset-sp.off:][:loc.Length], f.Size)
	default:
		rc = io.NopCloser(bytes.NewReader(sp.buf))
	}
	if err != nil && errors.Is(err, driver.ErrNotFound) {
		// Compaction may have moved the file and GC deleted the pack
		// since the stream located it: look again, once.
		return st.relocate(f, loc, err)
	}
	return rc, err
}

// relocate reads file f anew after its read at loc found nothing.
func (st *stream) relocate(f layer.File, loc meta.Location, cause error) (io.ReadCloser, error) {
	locs, err := st.s.locate(st.ctx, []digest.Digest{f.Digest})
	if err != nil {
		return nil, err
	}
	now, ok := locs[f.Digest]
	switch {
	case ok && now != loc:
		return st.s.openAt(st.ctx, f.Digest, now, f.Size)
	case !ok && !loc.IsZero():
		return st.s.openLegacy(st.ctx, f.Digest)
	}
	return nil, cause
}

// free gives back the slots of the spans before span k: the reader is
// past their files (spans only go forward).
func (st *stream) free(k int) {
	for ; st.freed < k; st.freed++ {
		st.release(st.spans[st.freed])
	}
}

func (st *stream) release(sp *span) {
	if sp.large {
		return
	}
	select {
	case <-sp.done:
		sp.buf = nil
		<-st.slots
	case <-st.ctx.Done():
	}
}

// Close implements layer.Payloads.
func (st *stream) Close() error {
	st.cancel()
	st.wg.Wait()
	st.spans = nil
	return nil
}
