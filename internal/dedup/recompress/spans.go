package recompress

import (
	"encoding/binary"
	"errors"
	"slices"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// Spans: the searched stretches written down. Copies leave a rebuild
// searching wherever no stored parse has the layer's tokens: tar headers,
// files too small to keep a parse, the heads of files whose first tokens
// reach back into the file before. A check writes the original's tokens
// there into the recipe instead, as the member's spans, in LZ77 sequences
// without their literals: for each match, how many literals come before
// it, its length and its distance; a literal is the input's byte, which a
// rebuild has. Where copies and spans cover a segment, its rebuild takes
// every token as given and searches nowhere; only stored blocks (whose
// tokens the original does not keep) and segments a check could not
// reproduce with them are still searched.
//
// Like a copy, a span is a true stretch of the stream's tokens from one of
// its token boundaries, kept only once its segment reproduced the original
// with it. It needs nothing but the recipe and the input, so a restore
// always has it; spans that do not decode are ignored (the segment is
// searched), so no span can fail a restore, and a wrong one only gives
// other bytes, which the digest check refuses.
//
// A member's spans are stored as one zstd frame of a format byte
// (spansSequences) and uvarints and bytes in streams of one kind each,
// which compress a third better than sequences written whole: the span
// count; per span, the bytes since the previous
// span's end and its match count; per span, the literals before each
// match and after the last (uvarints); then, per match, its length−3, the
// high byte of its distance−1 and the low byte.

// Span is a stretch of a member's input whose tokens its recipe holds:
// Size input bytes from offset In.
type Span struct {
	In, Size int64
	lits     []byte // uvarints: the literals before each match, after the last
	// lens, dhi and dlo hold, per match, its length−3 and the high and
	// low bytes of its distance−1.
	lens, dhi, dlo []byte
}

// tokens appends the span's tokens to dst; in is the input from the
// span's first byte (at least Size bytes).
func (sp *Span) tokens(dst []deflate.Token, in []byte) []deflate.Token {
	b, at := sp.lits, 0
	literals := func() {
		v, n := binary.Uvarint(b)
		b = b[n:]
		for end := at + int(v); at < end; at++ {
			dst = append(dst, deflate.LiteralToken(in[at]))
		}
	}
	for k := range sp.lens {
		literals()
		length := int(sp.lens[k]) + 3
		dst = append(dst, deflate.MatchToken(length, int(sp.dhi[k])<<8|int(sp.dlo[k])+1))
		at += length
	}
	literals()
	return dst
}

// spanWriter builds spans from a stream's tokens.
type spanWriter struct {
	spans []Span
	open  bool
	lits  int // literals since the span's last match
}

// add appends token t, starting at input offset at, to the span under
// way, or starts one there.
func (w *spanWriter) add(at int64, t deflate.Token) {
	if !w.open {
		w.spans = append(w.spans, Span{In: at})
		w.open, w.lits = true, 0
	}
	sp := &w.spans[len(w.spans)-1]
	sp.Size += int64(t.Size())
	if !t.IsMatch() {
		w.lits++
		return
	}
	d := t.Dist() - 1
	sp.lits = binary.AppendUvarint(sp.lits, uint64(w.lits))
	sp.lens = append(sp.lens, byte(t.Length()-3))
	sp.dhi, sp.dlo = append(sp.dhi, byte(d>>8)), append(sp.dlo, byte(d))
	w.lits = 0
}

// end closes the span under way, if any.
func (w *spanWriter) end() {
	if !w.open {
		return
	}
	w.open = false
	sp := &w.spans[len(w.spans)-1]
	sp.lits = binary.AppendUvarint(sp.lits, uint64(w.lits))
}

// findSpans returns the spans of a segment: the runs of the original's
// tokens (orig, in input order) that no copy covers, stored blocks left
// out, those worth their bytes (worthSpanning) or, with all, every one.
func findSpans(orig []origToken, copies []Copy, all bool) []Span {
	var w spanWriter
	c := 0
	for _, o := range orig {
		for c < len(copies) && copies[c].In+copies[c].Size <= o.off {
			c++
		}
		if o.stored || (c < len(copies) && copies[c].In <= o.off) {
			w.end()
			continue
		}
		w.add(o.off, o.tok)
	}
	w.end()
	if all {
		return w.spans
	}
	return slices.DeleteFunc(w.spans, func(sp Span) bool { return !worthSpanning(&sp) })
}

// pruneCopies drops, of a segment's copies (from findCopies with spans),
// those shorter than minCopy that do not lie between spans (or the
// segment's edges, or other copies): the search that resumes beside one
// would search its few bytes for less than the copy takes in the recipe.
func pruneCopies(copies []Copy, spans []Span, from, end int64) []Copy {
	edges := make(map[int64]bool, 2*len(spans)+2*len(copies)+2)
	edges[from], edges[end] = true, true
	for _, sp := range spans {
		edges[sp.In], edges[sp.In+sp.Size] = true, true
	}
	for _, c := range copies {
		if c.Size >= minCopy {
			edges[c.In], edges[c.In+c.Size] = true, true
		}
	}
	return slices.DeleteFunc(copies, func(c Copy) bool {
		return c.Size < minCopy && !(edges[c.In] && edges[c.In+c.Size])
	})
}

// resumeBytes is what a search resuming after a stretch costs besides the
// bytes it searches, in bytes searched: it hashes up to 32 KiB behind it,
// estimated at an eighth of a search's cost per byte (not measured on its
// own).
const resumeBytes = 4 << 10

// worthSpanning reports whether span sp saves enough search for the
// recipe bytes it takes (about 3 per match): spanValue input bytes per
// byte.
func worthSpanning(sp *Span) bool {
	return sp.Size+resumeBytes >= int64(spanValue*(3*len(sp.lens)+4))
}

// spanValue is how many bytes of search a byte of spans must save. On the
// Debian full profile (parses on), against keeping every span (level-6
// restores 38% faster per core, the store 8% larger): at 64, spans cover
// 13% of the level-6 input and take 19 MB, restores 23% faster, the store
// 4.3% larger; at 128, 6.8% and 12.5 MB, the store 3.0% larger, the
// storage ratio 4.6% below parses off's, within the 5% the parse frames,
// block headers, copies and spans may cost together.
const spanValue = 128

// encodeSpans writes a member's spans, in input order, as stored.
func encodeSpans(spans []Span) ([]byte, error) {
	if len(spans) == 0 {
		return nil, nil
	}
	raw := binary.AppendUvarint([]byte{spansSequences}, uint64(len(spans)))
	var end int64
	for _, sp := range spans {
		raw = binary.AppendUvarint(raw, uint64(sp.In-end))
		raw = binary.AppendUvarint(raw, uint64(len(sp.lens)))
		end = sp.In + sp.Size
	}
	for _, part := range []func(*Span) []byte{
		func(sp *Span) []byte { return sp.lits },
		func(sp *Span) []byte { return sp.lens },
		func(sp *Span) []byte { return sp.dhi },
		func(sp *Span) []byte { return sp.dlo },
	} {
		for i := range spans {
			raw = append(raw, part(&spans[i])...)
		}
	}
	return sealFrame(raw)
}

var errBadSpans = errors.New("recompress: spans do not decode")

// spansSequences is the format of spans written as sequences (the only
// one so far): a later format (matches named by their place in the hash
// chain, say) gets another byte, and a rebuild that does not know it
// searches.
const spansSequences = 1

// decodeSpans reads the spans of a member of size input bytes, checking
// that each lies inside it, after the one before, and that each match is
// one DEFLATE can write.
func decodeSpans(b []byte, size int64) ([]Span, error) {
	if len(b) == 0 {
		return nil, nil
	}
	// A match takes 3 bytes and a few for its literal count and covers at
	// least 3 input bytes: a frame that inflates far past the member is
	// not spans.
	n, raw, err := openFrame(b, spansSequences, uint64(3*size), uint64(size), errBadSpans)
	if err != nil {
		return nil, err
	}
	var ok bool
	spans := make([]Span, n)
	gaps := make([]int64, n) // bytes since the span before
	counts := make([]int, n) // matches
	var total uint64
	for i := range spans {
		var gap, m uint64
		gap, raw, ok = uvarint(raw)
		if ok {
			m, raw, ok = uvarint(raw)
		}
		if !ok || gap > uint64(size) || m > uint64(size) {
			return nil, errBadSpans
		}
		gaps[i], counts[i] = int64(gap), int(m)
		total += m
	}
	if total > uint64(size) {
		return nil, errBadSpans
	}
	for i := range spans {
		sp := &spans[i]
		start := raw
		for range counts[i] + 1 {
			var v uint64
			if v, raw, ok = uvarint(raw); !ok || v > uint64(size) {
				return nil, errBadSpans
			}
			sp.Size += int64(v)
		}
		sp.lits = start[:len(start)-len(raw)]
	}
	if uint64(len(raw)) != 3*total {
		return nil, errBadSpans
	}
	lens, dhi, dlo := raw[:total], raw[total:2*total], raw[2*total:]
	var end int64
	for i := range spans {
		sp := &spans[i]
		m := counts[i]
		sp.lens, sp.dhi, sp.dlo = lens[:m:m], dhi[:m:m], dlo[:m:m]
		lens, dhi, dlo = lens[m:], dhi[m:], dlo[m:]
		for k := range m {
			if sp.dhi[k] >= 128 {
				return nil, errBadSpans // a distance past 32 KiB
			}
			sp.Size += int64(sp.lens[k]) + 3
		}
		sp.In = end + gaps[i]
		if sp.Size == 0 || sp.Size > size || sp.In+sp.Size > size {
			return nil, errBadSpans
		}
		end = sp.In + sp.Size
	}
	return spans, nil
}

// uvarint reads one uvarint from b.
func uvarint(b []byte) (uint64, []byte, bool) {
	v, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, nil, false
	}
	return v, b[k:], true
}

// stretchSource is a deflate.TokenSource over a segment's copies (another
// source, or nil) and spans, merged in input order.
type stretchSource struct {
	copies deflate.TokenSource
	spans  []Span
	in     []byte // the segment's input, from offset from
	from   int64
	buf    []deflate.Token

	peeked bool // the next copy is read
	cOff   int64
	cToks  []deflate.Token
	cOK    bool
}

func (s *stretchSource) Next() (int64, []deflate.Token, bool) {
	if !s.peeked && s.copies != nil {
		s.cOff, s.cToks, s.cOK = s.copies.Next()
	}
	s.peeked = true
	for len(s.spans) > 0 && (!s.cOK || s.spans[0].In < s.cOff) {
		sp := &s.spans[0]
		s.spans = s.spans[1:]
		if sp.In < s.from || sp.In-s.from+sp.Size > int64(len(s.in)) {
			continue // not this segment's: a damaged recipe
		}
		s.buf = sp.tokens(s.buf[:0], s.in[sp.In-s.from:])
		return sp.In, s.buf, true
	}
	if s.cOK {
		s.peeked = false
		return s.cOff, s.cToks, true
	}
	return 0, nil, false
}
