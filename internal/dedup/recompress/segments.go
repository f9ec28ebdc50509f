package recompress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// Restart points. Parsing a gzip member (deflate.Walk) finds where each
// block of its body ends; when the recipe search finds that compress/gzip
// (the deflate package's copy of it) wrote the member, those boundaries,
// thinned to one per restartSpacing input bytes, become its restart points.
// A rebuild then compresses the segments between them on every core and
// joins them bit for bit (deflate.Joiner). On the Debian dataset every
// boundary of level 6 layers whose window index is known (98%) restarts
// exactly, and 84% of level 1's (its restart is a warm-up); levels 2–3 get
// no points. The dedup worker verifies a recipe with Check, which drops
// the points that did not reproduce the blob: a point reaches a stored
// recipe only after it did.

// restartSpacing is the least input between two restart points: small
// enough to spread a layer of a few MiB over the cores, large enough that
// the history each segment rehashes (32 KiB) and the lookahead it
// compresses twice stay small against it.
const restartSpacing = 1 << 20

// restartLevel reports whether members encoded by id keep restart points,
// and at which deflate level.
func restartLevel(id string) (int, bool) {
	fam, level, _, err := parseID(id)
	if err != nil || fam != famStdlib || level == 2 || level == 3 {
		return 0, false
	}
	return level, deflate.Restartable(level)
}

// boundaryThinner keeps, of a stream's block boundaries in order, those
// that make good restart points: about restartSpacing apart, not near the
// end of the stream, and, unless anyWin (BestSpeed has no window index),
// with a known window index.
type boundaryThinner struct {
	anyWin bool
	kept   []deflate.Boundary
}

func (t *boundaryThinner) add(b deflate.Boundary) {
	last := int64(0)
	if n := len(t.kept); n > 0 {
		last = t.kept[n-1].In
	}
	if (t.anyWin || b.Win >= 0) && b.In-last >= restartSpacing {
		if t.anyWin {
			b.Win = 0
		}
		t.kept = append(t.kept, b)
	}
}

// done returns the points kept for a stream of size bytes.
func (t *boundaryThinner) done(size int64) []deflate.Boundary {
	for len(t.kept) > 0 && t.kept[len(t.kept)-1].In+restartSpacing/2 > size {
		t.kept = t.kept[:len(t.kept)-1]
	}
	return t.kept
}

// WithoutRestarts returns r with no restart points: rebuilt by one
// encoder, as the blob was written.
func (r Recipe) WithoutRestarts() Recipe {
	out := r
	out.Members = make([]Member, len(r.Members))
	for i, m := range r.Members {
		m.Restarts, m.Copies, m.Headers, m.Spans = nil, nil, nil, nil
		out.Members[i] = m
	}
	return out
}

// HasRestarts reports whether any member of r has restart points.
func (r Recipe) HasRestarts() bool {
	return r.anyMember(func(m Member) bool { return len(m.Restarts) > 0 })
}

// anyMember reports whether some member of r satisfies f.
func (r Recipe) anyMember(f func(Member) bool) bool {
	return slices.ContainsFunc(r.Members, f)
}

// maxSegment bounds the input of one segment: points are about
// restartSpacing apart (a block of highly compressible input can add a few
// MiB), so only a damaged recipe asks for more, and its rebuild must not
// hold gigabytes.
const maxSegment = 64 << 20

// checkRestarts rejects restart points a rebuild could not use.
func checkRestarts(m Member) error {
	var prev deflate.Boundary
	for _, b := range m.Restarts {
		if b.In <= prev.In || b.Bit <= prev.Bit || b.In-prev.In > maxSegment || b.In+deflate.Lookahead > m.Size {
			return fmt.Errorf("%w: restart point at %d after %d in a member of %d bytes", ErrMismatch, b.In, prev.In, m.Size)
		}
		prev = b
	}
	if m.Size-prev.In > maxSegment {
		return fmt.Errorf("%w: last restart point at %d in a member of %d bytes", ErrMismatch, prev.In, m.Size)
	}
	end := int64(0)
	for _, c := range m.Copies {
		if c.In < end || c.Size <= 0 || c.In+c.Size > m.Size {
			return fmt.Errorf("%w: copy of %d bytes at %d after %d in a member of %d bytes", ErrMismatch, c.Size, c.In, end, m.Size)
		}
		end = c.In + c.Size
	}
	// Headers are not checked: one a rebuild cannot find or read is
	// derived again (deflate/header.go), so no header can fail a restore.
	return nil
}

// CopiedBytes is how many uncompressed bytes of r's members its copies
// cover: the input a rebuild takes from stored parses, not searching.
func (r Recipe) CopiedBytes() int64 {
	var n int64
	for _, m := range r.Members {
		for _, c := range m.Copies {
			n += c.Size
		}
	}
	return n
}

// SpannedBytes is how many uncompressed bytes of r's members its spans
// cover: the input whose tokens the recipe holds itself.
func (r Recipe) SpannedBytes() int64 {
	var n int64
	for _, m := range r.Members {
		m.Stretches(func(_, size int64, span bool) {
			if span {
				n += size
			}
		})
	}
	return n
}

// Stretches calls f with each stretch of m's input whose tokens a rebuild
// takes as given, from its copies (span false) or its spans, in input
// order.
func (m Member) Stretches(f func(in, size int64, span bool)) {
	spans, _ := decodeSpans(m.Spans, m.Size, m.Copies)
	c := 0
	for _, sp := range spans {
		for ; c < len(m.Copies) && m.Copies[c].In < sp.In; c++ {
			f(m.Copies[c].In, m.Copies[c].Size, false)
		}
		f(sp.In, sp.Size, true)
	}
	for ; c < len(m.Copies); c++ {
		f(m.Copies[c].In, m.Copies[c].Size, false)
	}
}

// HasCopies reports whether any member of r lists copies: whether a
// restore has stored parses to follow at all.
func (r Recipe) HasCopies() bool {
	return r.anyMember(func(m Member) bool { return len(m.Copies) > 0 })
}

// Follows reports whether any member of r lists copies, block headers or
// spans: whether a restore takes the following rebuild (RebuildFollowing
// with the parses at hand) rather than the encoder's.
func (r Recipe) Follows() bool {
	return r.anyMember(func(m Member) bool { return len(m.Copies) > 0 || len(m.Headers) > 0 || len(m.Spans) > 0 })
}

// CopySources is the set of files (their indexes in the tar recipe) whose
// parses r's copies follow: the only ones whose tokens a rebuild reads.
func (r Recipe) CopySources() map[int]bool {
	srcs := make(map[int]bool)
	for _, m := range r.Members {
		for _, c := range m.Copies {
			srcs[c.Source] = true
		}
	}
	return srcs
}

// ParseLevel is the deflate level of the parses a rebuild of a blob with
// recipe r can follow (pack's parse frames): that of its compress/flate
// members whose tokens can be followed; 0 for none.
func (r Recipe) ParseLevel() int {
	for _, m := range r.Members {
		if fam, level, _, err := parseID(m.Encoder); err == nil && fam == famStdlib && deflate.Searchable(level) && level > 0 {
			return level
		}
	}
	return 0
}

// segment is one unit of a parallel rebuild.
type segment struct {
	from deflate.Boundary
	to   *deflate.Boundary
	hist []byte // input before from
	in   []byte // input from from, lookahead included; hist's buffer continued (buf)
	done chan segmentResult
	// parses are those of the files the segment holds; copies, the
	// stretches it follows (a restore's from the recipe, a check's found).
	parses []*Parse
	copies []Copy
	// headers are the original's block headers the segment writes back
	// (a restore's from the recipe, a check's decoded).
	headers []deflate.BlockHeader
	// spans are the stretches whose tokens the recipe holds (a restore's
	// from the recipe, a check's found).
	spans []Span
}

// end is the input offset the segment's output ends at.
func (s *segment) end() int64 {
	if s.to == nil {
		return s.from.In + int64(len(s.in))
	}
	return s.to.In
}

// buf returns the segment's history and input, one buffer, and the member
// offset of its first byte.
func (s *segment) buf() ([]byte, int64) {
	return s.hist[:len(s.hist)+len(s.in)], s.from.In - int64(len(s.hist))
}

// following is what a segmented rebuild follows: the parses at hand and,
// in a restore, the member's copies and block headers.
type following struct {
	parses  *Parses
	base    int64                 // the member's offset in the uncompressed stream
	copies  []Copy                // the member's, for a restore
	headers []deflate.BlockHeader // the member's, for a restore
	spans   []Span                // the member's, for a restore
}

// found is what a check's segments reproduced the original with.
type found struct {
	copies  []Copy
	headers []deflate.BlockHeader
	spans   []Span
}

// source is the stretches s follows: its copies whose parses are at hand
// and its spans, in input order; nil when none is left.
func (s *segment) source(fl *following) deflate.TokenSource {
	var copies deflate.TokenSource
	if len(s.copies) > 0 && len(s.parses) > 0 {
		copies = follow(s.copies, s.parses, fl.base)
	}
	if len(s.spans) == 0 {
		return copies
	}
	buf, base := s.buf()
	return &stretchSource{copies: copies, spans: s.spans, buf: buf, base: base, from: s.from.In}
}

// compress compresses s, following its copies and writing its block
// headers back: in a restore those the recipe lists (copies that check
// out); in a check (chk set) those found by comparing the original's
// tokens with the parses and decoded from the original, kept only if the
// output they give is the original's.
func (s *segment) compress(level int, fl *following, chk *segmentCheck) segmentResult {
	switch {
	case fl == nil:
		s.copies, s.headers, s.spans = nil, nil, nil
	case chk != nil:
		s.copies, s.headers, s.spans = nil, nil, nil
		keep := fl.parses
		if len(s.parses) == 0 && !keep.KeepHeaders && !keep.KeepSpans {
			break
		}
		orig, headers, err := originalTokens(chk.original, chk.bodyStart, s, len(s.parses) > 0 || keep.KeepSpans)
		if err != nil {
			break
		}
		if keep.KeepHeaders {
			s.headers = headers
		}
		if len(s.parses) > 0 {
			s.copies = findCopies(orig, s.parses, fl.base, s.end(), keep.KeepSpans)
		}
		if keep.KeepSpans {
			s.spans = findSpans(orig, s.copies)
			s.copies = pruneCopies(s.copies, s.spans, s.from.In, s.end())
			buf, base := s.buf()
			chain(s.spans, buf, base)
		}
	}
	var src deflate.TokenSource
	if fl != nil {
		src = s.source(fl)
	}
	var headers map[int64]*deflate.BlockHeader
	if len(s.headers) > 0 {
		headers = make(map[int64]*deflate.BlockHeader, len(s.headers))
		for i := range s.headers {
			headers[s.headers[i].In] = &s.headers[i]
		}
	}
	out, err := deflate.CompressSegmentHeaders(level, s.from, s.hist, s.in, s.to, src, headers)
	if chk != nil && (src != nil || headers != nil) {
		ok := err == nil
		if ok {
			ok, err = chk.matches(out, s.from.Bit, s.toBit())
		}
		if err == nil && !ok {
			// The copies, the spans, the headers or the restart
			// point: search, and let the check tell.
			s.copies, s.headers, s.spans = nil, nil, nil
			out, err = deflate.CompressSegment(level, s.from, s.hist, s.in, s.to)
		}
	}
	return segmentResult{out: out, err: err}
}

// toBit is the stream bit the segment ends at, -1 at the stream's end.
func (s *segment) toBit() int64 {
	if s.to == nil {
		return -1
	}
	return s.to.Bit
}

type segmentResult struct {
	out []byte
	err error
}

// rebuildSegments writes the deflate body of m (size bytes of input read
// from r) by compressing the segments between its restart points on
// workers goroutines and joining them in order; a check returns the
// copies and block headers its segments reproduced the original with. Memory stays bounded:
// about 3×workers segments are in flight. With chk, each segment is
// checked against the original before it is joined (segmentCheck).
func rebuildSegments(w io.Writer, level int, m Member, r io.Reader, workers int, chk *segmentCheck, fl *following) (found, error) {
	if err := checkRestarts(m); err != nil {
		return found{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs := make(chan *segment, workers)
	order := make(chan *segment, workers)
	for range workers {
		go func() {
			for s := range jobs {
				if ctx.Err() != nil {
					s.done <- segmentResult{err: ctx.Err()}
					continue
				}
				s.done <- s.compress(level, fl, chk)
			}
		}()
	}
	readErr := make(chan error, 1)
	go func() {
		defer close(order)
		defer close(jobs)
		readErr <- feedSegments(ctx, level, m, r, jobs, order, fl, chk == nil)
	}()
	j := &deflate.Joiner{W: w}
	var err error
	var kept found
	for s := range order {
		res := <-s.done
		if err != nil {
			continue
		}
		out := res.out
		if chk != nil {
			if out, err = chk.segment(level, s, res); chk.dropped[s.from.In] {
				s.copies, s.headers, s.spans = nil, nil, nil // merged into the segment before
			}
			kept.copies = append(kept.copies, s.copies...)
			kept.headers = append(kept.headers, s.headers...)
			kept.spans = append(kept.spans, s.spans...)
		} else if res.err != nil {
			err = fmt.Errorf("recompress: segment at %d: %w", s.from.In, res.err)
			if errors.Is(res.err, deflate.ErrDiverged) {
				err = fmt.Errorf("%w: segment at %d: %w", ErrMismatch, s.from.In, res.err)
			}
		}
		if err == nil {
			if err = j.Add(out, s.from.Bit, s.toBit()); err != nil {
				err = fmt.Errorf("%w: %w", ErrMismatch, err)
			}
		}
		if err == nil && fl != nil {
			fl.parses.release(fl.base + s.end())
		}
		if err != nil {
			cancel()
		}
	}
	if rerr := <-readErr; err == nil {
		err = rerr
	}
	return kept, err
}

// Checking restart points. The dedup worker verifies a recipe with the
// blob at hand, so a restart point that does not reproduce it (BestSpeed's
// warm-up is not always exact) costs only itself: its segment is
// compressed again from the last point that held, through the segment's
// end, and the part from the bad point on is what gets joined. The point
// is then dropped from the recipe stored.

// maxHeal bounds the input compressed again from a point that held: past
// it, so many points failed in a row that they are not worth keeping.
const maxHeal = 16 << 20

// errRestartsUnusable means too many restart points failed in a row.
var errRestartsUnusable = fmt.Errorf("%w: restart points do not reproduce the stream", ErrMismatch)

// segmentCheck checks a member's segments against the original blob.
type segmentCheck struct {
	original  io.ReaderAt
	bodyStart int64 // the member body's offset in original
	dropped   map[int64]bool
	// anchor is the last segment whose start point held; since is the
	// member's input from anchor's start to the current segment's.
	anchor *segment
	since  []byte
}

// segment returns the output to join for s, given its compression's
// result: that output if it matches the original, else the same bits
// compressed from the anchor.
func (c *segmentCheck) segment(level int, s *segment, res segmentResult) ([]byte, error) {
	ok := res.err == nil
	if ok {
		var err error
		if ok, err = c.matches(res.out, s.from.Bit, s.toBit()); err != nil {
			return nil, err
		}
	} else if !errors.Is(res.err, deflate.ErrDiverged) {
		return nil, fmt.Errorf("recompress: segment at %d: %w", s.from.In, res.err)
	}
	core := s.in
	if s.to != nil {
		core = s.in[:s.to.In-s.from.In]
	}
	if ok {
		c.anchor, c.since = s, append(c.since[:0], core...)
		return res.out, nil
	}
	if c.anchor == nil {
		return nil, fmt.Errorf("%w: first segment of a member", ErrMismatch)
	}
	if len(c.since) > maxHeal {
		return nil, errRestartsUnusable
	}
	a := c.anchor
	in := append(slices.Clone(c.since), s.in...)
	redo, err := deflate.CompressSegment(level, a.from, a.hist, in, s.to)
	if err != nil {
		return nil, fmt.Errorf("%w: segment at %d, again from %d: %w", ErrMismatch, s.from.In, a.from.In, err)
	}
	out := slices.Clone(redo[s.from.Bit/8-a.from.Bit/8:])
	deflate.MaskSegment(out, s.from.Bit, -1)
	if ok, err := c.matches(out, s.from.Bit, s.toBit()); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%w: segment at %d, again from %d", ErrMismatch, s.from.In, a.from.In)
		}
		return nil, err
	}
	if c.dropped == nil {
		c.dropped = map[int64]bool{}
	}
	c.dropped[s.from.In] = true
	c.since = append(c.since, core...)
	return out, nil
}

// matches reports whether seg, a segment's output from bit from to bit
// to (to < 0: the stream's end), equals the original's bits there.
func (c *segmentCheck) matches(seg []byte, from, to int64) (bool, error) {
	want := make([]byte, len(seg))
	n, err := c.original.ReadAt(want, c.bodyStart+from/8)
	if n < len(want) {
		if err != nil && !errors.Is(err, io.EOF) {
			return false, fmt.Errorf("recompress: read original: %w", err)
		}
		return false, nil
	}
	deflate.MaskSegment(want, from, to)
	return bytes.Equal(seg, want), nil
}

// held returns the points of rs that reproduced the original.
func (c *segmentCheck) held(rs []deflate.Boundary) []deflate.Boundary {
	var out []deflate.Boundary
	for _, b := range rs {
		if !c.dropped[b.In] {
			out = append(out, b)
		}
	}
	return out
}

// feedSegments reads the member's input and hands out its segments in
// order. Each segment gets a buffer of its own holding its history and
// input: what it shares with the segment before (the history, and the
// lookahead that segment read past its end) is copied from that one's,
// and the rest is read into place, so no segment's input is copied
// again.
func feedSegments(ctx context.Context, level int, m Member, r io.Reader, jobs, order chan<- *segment, fl *following, restore bool) error {
	histLen := int64(deflate.HistoryLen(level))
	var prev []byte     // the last segment's buffer
	var prevStart int64 // the input offset of prev[0]
	var read int64      // input bytes read
	from := deflate.Boundary{}
	for i := 0; i <= len(m.Restarts); i++ {
		var to *deflate.Boundary
		end := m.Size
		if i < len(m.Restarts) {
			to = &m.Restarts[i]
			end = min(m.Size, to.In+deflate.Lookahead)
		}
		lo := max(0, from.In-histLen)
		buf := make([]byte, end-lo)
		copy(buf, prev[lo-prevStart:read-prevStart])
		n, err := io.ReadFull(r, buf[read-lo:])
		if read += int64(n); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("recompress: uncompressed stream ended after %d of %d bytes", read, m.Size)
			}
			return fmt.Errorf("recompress: read uncompressed: %w", err)
		}
		prev, prevStart = buf, lo
		s := &segment{
			from: from,
			to:   to,
			hist: buf[:from.In-lo],
			in:   buf[from.In-lo:],
			done: make(chan segmentResult, 1),
		}
		if fl != nil {
			s.parses = fl.parses.overlapping(level, fl.base+from.In, fl.base+s.end())
			if restore {
				toIn := int64(-1)
				if to != nil {
					toIn = to.In
				}
				s.copies = inSegment(fl.copies, func(c *Copy) int64 { return c.In }, from.In, toIn)
				s.headers = inSegment(fl.headers, func(h *deflate.BlockHeader) int64 { return h.In }, from.In, toIn)
				s.spans = inSegment(fl.spans, func(sp *Span) int64 { return sp.In }, from.In, toIn)
			}
		}
		select {
		case order <- s:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case jobs <- s:
		case <-ctx.Done():
			s.done <- segmentResult{err: ctx.Err()}
			return ctx.Err()
		}
		if to != nil {
			from = *to
		}
	}
	return nil
}
