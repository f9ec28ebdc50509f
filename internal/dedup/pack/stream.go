package pack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/semaphore"

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
	left  int           // files still to hand out from it
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

// openSpans is how many of the latest spans a file may still join: a
// layer's files alternate between its own pack and the packs of the layers
// it shares files with (a package of its own, then a shared one, in path
// order), and each of those runs grows its own span instead of cutting the
// others short. It bounds how many spans a stream holds at once (see
// stream). Measured on the Debian full profile's stores (82 layers), 8
// instead of 4 cuts the reads per layer from 21.2 to 15.4 for 2% more bytes
// read (16: 12.7), at up to 4 more spans (16 MiB) held by a rebuild.
const openSpans = 8

// plan groups files (in order) into spans: a file joins one of the
// openSpans latest spans when it lies in the same pack at or after that
// span's end, no more than maxGap past it, and the span stays within
// maxSpan. Files in layer order were written to packs in that order, so a
// layer of new files reads as a few long ranges, and the files it shares
// with other layers as a few more. A small file listed again is kept from
// its first occurrence (of[i] == reuse), within repeatMax bytes; keep
// counts the occurrences still to come.
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
		if k := joinable(spans, loc, f.Size, maxSpan, maxGap); k >= 0 {
			spans[k].n = loc.Offset + loc.Length - spans[k].off
			of[i] = k
			continue
		}
		spans = append(spans, &span{pack: loc.Pack, off: loc.Offset, n: loc.Length, large: loc.Length > maxSpan || f.Size > smallFile})
		of[i] = len(spans) - 1
	}
	for _, k := range of {
		if k != reuse {
			spans[k].left++
		}
	}
	for _, sp := range spans {
		sp.done = make(chan struct{})
	}
	return spans, of, keep
}

// joinable returns which of the openSpans latest spans a file of size
// bytes stored at loc can join, or -1.
func joinable(spans []*span, loc meta.Location, size, maxSpan, maxGap int64) int {
	if size > smallFile {
		return -1
	}
	for k := len(spans) - 1; k >= max(0, len(spans)-openSpans); k-- {
		sp := spans[k]
		end := sp.off + sp.n
		if sp.pack == loc.Pack && !sp.large && loc.Offset >= end && loc.Offset-end <= maxGap &&
			loc.Offset+loc.Length-sp.off <= maxSpan {
			return k
		}
	}
	return -1
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
	return s.stream(ctx, files, func(int) bool { return false })
}

// StreamParses is Stream handing out each file stored as a parse frame
// as a *Parsed or *ParsedStream, with its tokens: the payloads of a
// rebuild that follows them. want, when not nil, says which of files
// (by index) the rebuild follows; the others are inflated without their
// tokens.
func (s *Store) StreamParses(ctx context.Context, files []layer.File, want func(i int) bool) (layer.Payloads, error) {
	if want == nil {
		want = func(int) bool { return true }
	}
	return s.stream(ctx, files, want)
}

func (s *Store) stream(ctx context.Context, files []layer.File, tokens func(i int) bool) (layer.Payloads, error) {
	// Files are opened ahead of the reader's own checks: a damaged recipe's
	// entry fails the stream here, not a decoder sized by it.
	for _, f := range files {
		if f.Size < 0 || f.Digest.Validate() != nil {
			return nil, fmt.Errorf("pack: stream: %w: file %q of %d bytes", layer.ErrMismatch, f.Digest, f.Size)
		}
	}
	locs, err := s.locate(ctx, distinct(files))
	if err != nil {
		return nil, err
	}
	spans, of, keep := plan(files, locs, s.opts.MaxSpan, s.opts.MaxGap)
	ctx, cancel := context.WithCancel(ctx)
	st := &stream{s: s, ctx: ctx, cancel: cancel, files: files, locs: locs, spans: spans, of: of, tokens: tokens,
		keep: keep, kept: make(map[digest.Digest][]byte), slots: make(chan struct{}, s.opts.Inflight+openSpans)}
	st.ahead, st.budget = make(chan opened, aheadFiles), semaphore.NewWeighted(aheadBytes)
	st.wg.Add(2)
	go st.readAhead()
	go st.openAhead()
	return st, nil
}

// stream hands out a Stream's files. Each span read ahead holds a slot
// until its last file is opened, so memory stays within Inflight+openSpans
// spans. That many slots never deadlock: when the opener needs a span, the
// spans before it that still hold files are among the openSpans latest the
// plan had made by then (no file joins an older one), so a slot is left
// for it.
//
// Files are opened (a small one decompressed, a parse frame inflated with
// its tokens) by a goroutine of their own ahead of the reader, within
// aheadBytes of files and aheadFiles files: the reader, a layer's assembly,
// is the one stage of a restore no more cores can share, and decompression
// was most of its work (in a profile of level-6 restores with parses,
// inflating took 28% of the CPU; hashing, tar-split and the rest of the
// assembly 18%).
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
	keep   map[digest.Digest]int
	kept   map[digest.Digest][]byte
	slots  chan struct{}
	wg     sync.WaitGroup
	tokens func(i int) bool // files[i]'s parse frame comes with its tokens

	// ahead holds the files opened, in order; budget the bytes of files
	// they may hold. next counts the files opened (by openAhead) and
	// handed (by Next).
	ahead        chan opened
	budget       *semaphore.Weighted
	next, handed int
	failed       error // why openAhead stopped, read once ahead is closed
}

// opened is one file opened ahead, holding cost bytes of the budget.
type opened struct {
	rc   io.ReadCloser
	err  error
	cost int64
}

// The decode-ahead bounds: about a span's worth of decompressed files
// (with tokens, a parse's take some 2.3 times its bytes), and a few hundred
// of the smallest.
const (
	aheadBytes = 8 << 20
	aheadFiles = 256
)

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
	if st.handed >= len(st.files) {
		return nil, fmt.Errorf("pack: stream: all %d files handed out", len(st.files))
	}
	o, ok := <-st.ahead
	if !ok {
		// openAhead stopped early: the stream's context ended, or an
		// earlier file failed (opening it again would likely fail again).
		if err := st.ctx.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("pack: stream: stopped after a file failed: %w", st.failed)
	}
	st.handed++
	st.budget.Release(o.cost)
	return o.rc, o.err
}

// openAhead opens the files in order into ahead, each once the budget has
// room for it, until one fails or the stream ends.
func (st *stream) openAhead() {
	defer st.wg.Done()
	defer close(st.ahead)
	for st.next < len(st.files) {
		cost := min(st.files[st.next].Size, aheadBytes)
		if err := st.budget.Acquire(st.ctx, cost); err != nil {
			return
		}
		rc, err := st.openNext()
		select {
		case st.ahead <- opened{rc: rc, err: err, cost: cost}:
		case <-st.ctx.Done():
			if rc != nil {
				rc.Close()
			}
			return
		}
		if err != nil {
			st.failed = err
			return
		}
	}
}

// openNext opens the next file.
func (st *stream) openNext() (io.ReadCloser, error) {
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
	rc, err := st.open(f, k, st.tokens(i))
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

// open reads file f, which lies in span k, and gives back the span's slot
// once f was its last file.
func (st *stream) open(f layer.File, k int, tokens bool) (io.ReadCloser, error) {
	sp := st.spans[k]
	select {
	case <-sp.done:
	case <-st.ctx.Done():
		return nil, st.ctx.Err()
	}
	if sp.left--; sp.left == 0 {
		// The bytes are copied out (decodeSmall) or handed over whole (a
		// per-file object) before anything else reads the buffer.
		defer st.release(sp)
	}
	loc, located := st.locs[f.Digest]
	var (
		rc  io.ReadCloser
		err error
	)
	switch {
	case sp.large && located:
		rc, err = st.s.openAt(st.ctx, f.Digest, loc, f.Size, tokens)
	case sp.large:
		rc, err = st.s.openLegacy(st.ctx, f.Digest)
	case sp.err != nil:
		err = sp.err
	case located:
		rc, err = st.s.decodeSmall(f.Digest, sp.buf[loc.Offset-sp.off:][:loc.Length], f.Size, tokens)
	default:
		rc = io.NopCloser(bytes.NewReader(sp.buf))
	}
	if err != nil && errors.Is(err, driver.ErrNotFound) {
		// Compaction may have moved the file and GC deleted the pack
		// since the stream located it: look again, once.
		return st.relocate(f, loc, err, tokens)
	}
	return rc, err
}

// relocate reads file f anew after its read at loc found nothing.
func (st *stream) relocate(f layer.File, loc meta.Location, cause error, tokens bool) (io.ReadCloser, error) {
	locs, err := st.s.locate(st.ctx, []digest.Digest{f.Digest})
	if err != nil {
		return nil, err
	}
	now, ok := locs[f.Digest]
	switch {
	case ok && now != loc:
		return st.s.openAt(st.ctx, f.Digest, now, f.Size, tokens)
	case !ok && !loc.IsZero():
		return st.s.openLegacy(st.ctx, f.Digest)
	}
	return nil, cause
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
	for o := range st.ahead {
		if o.rc != nil {
			o.rc.Close()
		}
	}
	st.spans = nil
	return nil
}
