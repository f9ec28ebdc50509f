// Package recompress finds and replays byte-exact compression recipes for
// layer blobs: given a compressed blob and its uncompressed bytes, it finds
// which encoder (implementation, level, block size) produced each gzip member
// or zstd frame, keeping container bytes (headers, trailers, trailing data)
// verbatim, so dedup can drop the compressed copy and rebuild it exactly.
//
// A recipe is found by re-compressing with candidate encoders and comparing
// their output byte by byte as it is produced; a wrong candidate is abandoned
// at its first differing byte. ProbeRecipe compares only the start of each
// member, so that the rebuild verifying the recipe is the one full
// compression of a layer. Encoder output is version-sensitive: the golden
// tests pin it, and a recipe must be accepted only after Verify (or a
// rebuild) reproduces the blob's digest and size from stored pieces.
// compress/gzip members rebuild on every core from restart points
// (segments.go).
package recompress

import (
	"github.com/cairn-registry/cairn/internal/iowatch"

	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// ErrIrreproducible means no candidate encoder reproduces the blob; the
// layer must stay intact.
var ErrIrreproducible = errors.New("recompress: no encoder reproduces the blob")

// Format is the container format of a blob.
type Format string

// Formats a recipe can describe.
const (
	FormatNone Format = "none" // the blob is its uncompressed bytes
	FormatGzip Format = "gzip"
	FormatZstd Format = "zstd"
)

// Recipe rebuilds a compressed blob from its uncompressed bytes.
type Recipe struct {
	Format Format `json:"format"`
	// Size is the compressed blob's size.
	Size    int64    `json:"size"`
	Members []Member `json:"members,omitempty"`
	// Trailing holds bytes after the last gzip member, verbatim.
	Trailing []byte `json:"trailing,omitempty"`
}

// Member is one gzip member or zstd frame sequence.
type Member struct {
	// Header is the gzip member header verbatim (empty for zstd).
	Header []byte `json:"header,omitempty"`
	// Encoder names the encoder that reproduces the member's body, e.g.
	// "stdlib-gzip/6", "klauspost-gzip/9", "pgzip/5/1MiB", "klauspost-zstd/2".
	Encoder string `json:"encoder"`
	// Size is the member's uncompressed length.
	Size int64 `json:"size"`
	// Trailer is the gzip CRC32 and ISIZE verbatim (empty for zstd).
	Trailer []byte `json:"trailer,omitempty"`
	// Restarts are points from which the member's deflate stream can be
	// compressed in parallel segments (see segments.go).
	Restarts []deflate.Boundary `json:"restarts,omitempty"`
	// Copies are the stretches of the member whose tokens stored parses
	// give (follow.go), in input order; a check finds them.
	Copies []Copy `json:"copies,omitempty"`
	// Headers are the member's dynamic block headers, by input offset, in
	// the segments a check reproduced with them (deflate/header.go): a
	// rebuild writes them back instead of deriving the blocks' codes.
	Headers []deflate.BlockHeader `json:"headers,omitempty"`
	// Spans are the original's tokens where no copy has them, in the
	// segments a check reproduced with them (spans.go), encoded.
	Spans []byte `json:"spans,omitempty"`
}

// Tally adds one count per member encoder of r to counts, to learn which
// encoders real pushes use.
func (r Recipe) Tally(counts map[string]int) {
	for _, m := range r.Members {
		counts[m.Encoder]++
	}
}

var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// FindRecipe finds the recipe that rebuilds the size bytes of compressed from
// the uncompressed stream. uncompressed opens that stream from its start each
// time it is called (it is read once per candidate tried; an io.Closer is
// closed). Nothing larger than a compression window is held in memory.
func FindRecipe(ctx context.Context, compressed io.ReaderAt, size int64, uncompressed func() io.Reader) (Recipe, error) {
	return findRecipe(ctx, compressed, size, uncompressed, false)
}

// Probing. ProbeRecipe is FindRecipe with each candidate compared on the
// first probeInput uncompressed bytes of a member only (the whole of a
// smaller one), once at least probeOutput bytes of its output matched: far
// enough for candidates that agree at first (pgzip's first block is
// klauspost's stream) to part. Its recipe is a guess, as cheap as a few MiB
// of compression, which the rebuild that verifies it (needed anyway, since
// it reads the stored pieces) confirms or refutes; after a refuted guess
// (rare) FindRecipe runs in full.
const (
	probeInput  = 8 << 20
	probeOutput = 64 << 10
)

// ProbeRecipe guesses the recipe that rebuilds the size bytes of
// compressed; see probeInput. The guess must be verified before use.
func ProbeRecipe(ctx context.Context, compressed io.ReaderAt, size int64, uncompressed func() io.Reader) (Recipe, error) {
	return findRecipe(ctx, compressed, size, uncompressed, true)
}

func findRecipe(ctx context.Context, compressed io.ReaderAt, size int64, uncompressed func() io.Reader, probe bool) (Recipe, error) {
	var magic [4]byte
	n, err := compressed.ReadAt(magic[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Recipe{}, fmt.Errorf("recompress: read magic: %w", err)
	}
	switch {
	case n >= 3 && magic[0] == 0x1f && magic[1] == 0x8b && magic[2] == 8:
		return findGzip(ctx, compressed, size, uncompressed, probe)
	case n == 4 && bytes.Equal(magic[:], zstdMagic):
		return findZstd(ctx, compressed, size, uncompressed, probe)
	}
	return Recipe{Format: FormatNone, Size: size}, nil
}

func findGzip(ctx context.Context, ra io.ReaderAt, size int64, uncompressed func() io.Reader, probe bool) (Recipe, error) {
	c, err := parseGzip(ra, size)
	if err != nil {
		return Recipe{}, fmt.Errorf("%w: %w", ErrIrreproducible, err)
	}
	rec := Recipe{Format: FormatGzip, Size: size, Trailing: c.trailing}
	s := &source{open: uncompressed, probe: probe}
	defer s.close()
	var off int64
	for i, m := range c.members {
		body := io.NewSectionReader(ra, m.bodyStart, m.bodyEnd-m.bodyStart)
		id, err := s.match(ctx, gzipCandidates(m), off, m.size, body)
		if err != nil {
			return Recipe{}, fmt.Errorf("gzip member %d: %w", i, err)
		}
		mem := Member{Header: m.header, Encoder: id, Size: m.size, Trailer: m.trailer}
		if level, ok := restartLevel(id); ok {
			mem.Restarts = m.boundaries
			if level == 1 {
				mem.Restarts = m.speedBoundaries
			}
		}
		rec.Members = append(rec.Members, mem)
		off += m.size
	}
	return rec, nil
}

// findZstd handles a blob that is one klauspost zstd stream (one or more
// frames as its streaming encoder writes them). The uncompressed size comes
// from the source itself.
func findZstd(ctx context.Context, ra io.ReaderAt, size int64, uncompressed func() io.Reader, probe bool) (Recipe, error) {
	s := &source{open: uncompressed, probe: probe}
	defer s.close()
	body := io.NewSectionReader(ra, 0, size)
	n := int64(-1)
	if probe {
		// A probe stops early, so it cannot tell the size: count it
		// (inflating is far cheaper than compressing).
		r := uncompressed()
		var err error
		n, err = io.Copy(io.Discard, r)
		if c, ok := r.(io.Closer); ok {
			c.Close()
		}
		if err != nil {
			return Recipe{}, fmt.Errorf("recompress: read uncompressed: %w", err)
		}
	}
	id, err := s.match(ctx, zstdCandidates(), 0, n, body)
	if err != nil {
		return Recipe{}, err
	}
	if n < 0 {
		n = s.lastLen
	}
	return Recipe{Format: FormatZstd, Size: size, Members: []Member{{Encoder: id, Size: n}}}, nil
}

// source hands out readers positioned at a member's start, reusing the
// reader the previous winning candidate left exactly there.
type source struct {
	open    func() io.Reader
	r       io.Reader
	pos     int64 // position of r, -1 when unknown
	lastLen int64 // bytes the last winning candidate consumed
	probe   bool  // compare candidates on a member's first bytes only
}

func (s *source) close() {
	if c, ok := s.r.(io.Closer); ok {
		c.Close()
	}
	s.r = nil
}

func (s *source) at(off int64) (io.Reader, error) {
	if s.r != nil && s.pos == off {
		return s.r, nil
	}
	s.close()
	s.r = s.open()
	s.pos = 0
	if off > 0 {
		n, err := io.CopyN(io.Discard, s.r, off)
		s.pos = n
		if err != nil {
			return nil, fmt.Errorf("recompress: skip %d uncompressed bytes: %w", off, err)
		}
	}
	return s.r, nil
}

// match tries candidates in order on the n uncompressed bytes at off (n < 0:
// to the end) and returns the first whose output equals want exactly.
func (s *source) match(ctx context.Context, candidates []string, off, n int64, want io.Reader) (string, error) {
	buf := make([]byte, 64<<10)
	for _, id := range candidates {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if _, err := want.(io.Seeker).Seek(0, io.SeekStart); err != nil {
			return "", err
		}
		r, err := s.at(off)
		if err != nil {
			return "", err
		}
		ok, used, err := tryCandidate(ctx, id, r, n, want, buf, s.probe)
		if err != nil {
			return "", err
		}
		if ok {
			s.pos = off + used
			s.lastLen = used
			if used != n && n >= 0 {
				s.pos = -1 // a probe stopped inside the member
			}
			return id, nil
		}
		s.pos = -1
	}
	return "", ErrIrreproducible
}

// tryCandidate feeds up to n bytes of r (n < 0: all) to encoder id and
// reports whether its output equals want. It stops feeding at the first
// mismatch. Source and context errors are returned; encoder failures are
// just a non-match.
func tryCandidate(ctx context.Context, id string, r io.Reader, n int64, want io.Reader, buf []byte, probe bool) (bool, int64, error) {
	cmp := &compareWriter{want: want}
	enc, err := newEncoder(id, cmp, cores(0))
	if err != nil {
		return false, 0, err
	}
	if n >= 0 {
		r = io.LimitReader(r, n)
	}
	var used int64
	for !cmp.failed.Load() {
		if err := ctx.Err(); err != nil {
			enc.Close()
			return false, 0, err
		}
		k, rerr := r.Read(buf)
		if k > 0 {
			used += int64(k)
			if _, err := enc.Write(buf[:k]); err != nil {
				enc.Close()
				return false, 0, nil
			}
			if probe && used >= probeInput && cmp.matched.Load() >= probeOutput && !cmp.failed.Load() {
				// Whatever the encoder writes from here on is not compared.
				cmp.stop.Store(true)
				enc.Close()
				return true, used, nil
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			enc.Close()
			return false, 0, fmt.Errorf("recompress: read uncompressed: %w", rerr)
		}
	}
	if cmp.failed.Load() {
		enc.Close()
		return false, 0, nil
	}
	if n >= 0 && used != n {
		return false, 0, fmt.Errorf("recompress: uncompressed stream ended after %d of %d bytes", used, n)
	}
	if err := enc.Close(); err != nil {
		return false, 0, nil
	}
	if !cmp.done() {
		return false, 0, nil
	}
	return true, used, nil
}

// compareWriter checks bytes written against want. After the first
// difference it swallows everything, so encoders with background goroutines
// (pgzip) still shut down cleanly. failed is atomic because pgzip writes
// from its own goroutine while the feeding loop polls it.
type compareWriter struct {
	want    io.Reader
	buf     []byte
	failed  atomic.Bool
	stop    atomic.Bool  // a probe ended: swallow the rest
	matched atomic.Int64 // bytes matched, by whole writes
}

func (c *compareWriter) Write(p []byte) (int, error) {
	if c.failed.Load() || c.stop.Load() {
		return len(p), nil
	}
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), 64<<10)
		if cap(c.buf) < k {
			c.buf = make([]byte, 64<<10)
		}
		b := c.buf[:k]
		if _, err := io.ReadFull(c.want, b); err != nil || !bytes.Equal(b, p[:k]) {
			c.failed.Store(true)
			return n, nil
		}
		p = p[k:]
	}
	// Counted per write, so a probe never ends inside one: pgzip writes a
	// block's output at once, and it must match whole.
	c.matched.Add(int64(n))
	return n, nil
}

// done reports whether every byte matched and want is exhausted.
func (c *compareWriter) done() bool {
	if c.failed.Load() {
		return false
	}
	var one [1]byte
	k, _ := io.ReadFull(c.want, one[:])
	return k == 0
}

// Rebuild writes the blob recipe describes, reading its uncompressed bytes
// from uncompressed, on at most procs cores (0: GOMAXPROCS) where the
// encoder can use more than one.
func Rebuild(w io.Writer, recipe Recipe, uncompressed io.Reader, procs int) error {
	_, err := rebuild(w, recipe, uncompressed, nil, procs, nil)
	return err
}

// RebuildFollowing is Rebuild taking the tokens of the recipe's copies
// from parses wherever they check out, instead of searching.
func RebuildFollowing(w io.Writer, recipe Recipe, uncompressed io.Reader, procs int, parses *Parses) error {
	_, err := rebuild(w, recipe, uncompressed, nil, procs, parses)
	return err
}

// Check is Rebuild that also checks restart points against the blob the
// recipe must rebuild (original): each segment is compared with the
// original's bits before it is joined, and a segment that differs is
// compressed again from the last point that held (see segments.go). It
// returns the recipe without the points that did not hold. The output
// still needs its digest checked, as Rebuild's does.
func Check(w io.Writer, recipe Recipe, uncompressed io.Reader, original io.ReaderAt) (Recipe, error) {
	return rebuild(w, recipe, uncompressed, original, 0, nil)
}

// CheckFollowing is Check that also finds, in each segment, the stretches
// whose tokens parses give, and returns them as the members' Copies, each
// kept only once its segment reproduced the original with it.
func CheckFollowing(w io.Writer, recipe Recipe, uncompressed io.Reader, original io.ReaderAt, parses *Parses) (Recipe, error) {
	return rebuild(w, recipe, uncompressed, original, 0, parses)
}

func rebuild(w io.Writer, recipe Recipe, uncompressed io.Reader, original io.ReaderAt, procs int, parses *Parses) (Recipe, error) {
	procs = cores(procs)
	if recipe.Format == FormatNone {
		n, err := io.Copy(w, uncompressed)
		if err != nil {
			return recipe, fmt.Errorf("recompress: copy: %w", err)
		}
		if n != recipe.Size {
			return recipe, fmt.Errorf("recompress: uncompressed blob has %d bytes, recipe says %d", n, recipe.Size)
		}
		return recipe, nil
	}
	out := recipe
	out.Members = slices.Clone(recipe.Members)
	cw := &iowatch.Writer{W: w}
	w = cw
	var base int64 // the member's offset in the uncompressed stream
	for i, m := range recipe.Members {
		if _, err := w.Write(m.Header); err != nil {
			return out, err
		}
		if level, ok := restartLevel(m.Encoder); ok && (len(m.Restarts) > 0 || followable(m, level, parses, original != nil)) {
			var chk *segmentCheck
			if original != nil {
				chk = &segmentCheck{original: original, bodyStart: cw.N}
			}
			var fl *following
			if parses != nil && deflate.Searchable(level) {
				fl = &following{parses: parses, base: base, copies: m.Copies, headers: m.Headers}
				if chk == nil {
					// Spans that do not decode are searched instead.
					fl.spans, _ = decodeSpans(m.Spans, m.Size, m.Copies)
				}
			}
			found, err := rebuildSegments(w, level, m, uncompressed, procs, chk, fl)
			if err != nil {
				return out, fmt.Errorf("recompress: member %d: %w", i, err)
			}
			if chk != nil {
				out.Members[i].Restarts = chk.held(m.Restarts)
				out.Members[i].Copies = found.copies
				out.Members[i].Headers = found.headers
				if out.Members[i].Spans, err = encodeSpans(found.spans, found.copies); err != nil {
					return out, err
				}
			}
			base += m.Size
			if _, err := w.Write(m.Trailer); err != nil {
				return out, err
			}
			continue
		}
		cut := &cutWriter{w: w}
		enc, err := newEncoder(m.Encoder, cut, procs)
		if err != nil {
			return out, err
		}
		n, err := io.Copy(enc, io.LimitReader(uncompressed, m.Size))
		if err != nil {
			cut.cut.Store(true)
			enc.Close()
			return out, fmt.Errorf("recompress: member %d: %w", i, err)
		}
		if n != m.Size {
			cut.cut.Store(true)
			enc.Close()
			return out, fmt.Errorf("recompress: member %d: uncompressed stream ended after %d of %d bytes", i, n, m.Size)
		}
		if err := enc.Close(); err != nil {
			return out, fmt.Errorf("recompress: member %d: %w", i, err)
		}
		base += m.Size
		if _, err := w.Write(m.Trailer); err != nil {
			return out, err
		}
	}
	if _, err := w.Write(recipe.Trailing); err != nil {
		return out, err
	}
	return out, nil
}

// followable reports whether a member without restart points is rebuilt
// as one segment all the same, to follow stored parses: a member too small
// for restart points (under about 1.5 MiB of input: most small layers)
// would otherwise always be searched. A check looks for copies in every
// such member with parses at hand; a restore takes the segment path only
// where the recipe lists copies, so that nothing else changes.
func followable(m Member, level int, parses *Parses, check bool) bool {
	return parses != nil && deflate.Searchable(level) && m.Size <= maxFollowWhole && (check || len(m.Copies) > 0 || len(m.Headers) > 0 || len(m.Spans) > 0)
}

// maxFollowWhole bounds the member followed as one segment: the segment
// and, in a check, the original's tokens decoded for it (about 24 bytes
// per token) are held in memory, as a restart point's segment of about
// restartSpacing is. Members without restart points are mostly smaller
// than restartSpacing and a half.
const maxFollowWhole = 4 * restartSpacing

// cutWriter passes writes to w until cut, then drops them: what an encoder
// flushes on Close after its input failed is not the blob's bytes, and a
// reader streaming a rebuild must only ever see a prefix of the blob.
type cutWriter struct {
	w   io.Writer
	cut atomic.Bool // pgzip writes from its own goroutine
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if c.cut.Load() {
		return len(p), nil
	}
	return c.w.Write(p)
}

// ErrMismatch means a rebuild did not reproduce the expected digest or size.
var ErrMismatch = errors.New("recompress: rebuild does not reproduce the blob")

// Verify rebuilds the blob from recipe and uncompressed and checks that it
// has the expected digest and size. Only a verified recipe may replace the
// intact blob.
func Verify(recipe Recipe, uncompressed io.Reader, want digest.Digest, size int64) error {
	if err := want.Validate(); err != nil {
		return fmt.Errorf("recompress: %w", err)
	}
	v := want.Verifier()
	cw := &iowatch.Writer{W: v}
	if err := Rebuild(cw, recipe, uncompressed, 0); err != nil {
		return err
	}
	if cw.N != size || !v.Verified() {
		return fmt.Errorf("%w: got %d bytes, want %d bytes of %s", ErrMismatch, cw.N, size, want)
	}
	return nil
}
