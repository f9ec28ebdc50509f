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
// there into the recipe instead, as the member's spans: every run of
// tokens no copy covers, stored blocks aside (they have none). A literal
// is the input's byte, which a rebuild has; a match is named by its place
// in the hash chain the encoder's search walked from its first byte
// (deflate.Chains), its length being the agreement at that candidate, as
// the level 4–9 search takes it. A rebuild replays the chains over the
// input to find each match's distance and length again: no search
// anywhere copies and spans cover, only in stored blocks (whose tokens
// the original does not keep) and segments a check could not reproduce
// with them. A match the chain does not name (not Go's search: another
// producer, a flush) is written whole, behind an escape.
//
// Like a copy, a span is a true stretch of the stream's tokens from one of
// its token boundaries, kept only once its segment reproduced the original
// with it. It needs nothing but the recipe and the input, so a restore
// always has it; spans that do not decode are ignored (the segment is
// searched), so no span can fail a restore, and a wrong one only gives
// other bytes, which the digest check refuses.
//
// A member's spans are stored as one zstd frame of a format byte and
// uvarints and bytes in streams of one kind each, which compress better
// than sequences written whole: the span count; per span, where it starts
// and ends, each 0 where that is the edge of the copy before or after it
// (spans fill the gaps between copies, so mostly 0: see edgeCursor), its
// match count; per span, the literals before each match and after the
// last (uvarints); per match, its place (placeEscaped: written whole); per
// escaped match, its length−3, the high byte of its distance−1 and the
// low byte. Recipes written before hold spans as sequences
// (spansSequences: the bytes since the previous span's end and the match
// count per span, and each match's length and distance), about 3.5 bytes
// a match, which could afford only the stretches that saved most search;
// they rebuild as they did.

// Span is a stretch of a member's input whose tokens its recipe holds:
// Size input bytes from offset In.
type Span struct {
	In, Size int64
	lits     []byte // uvarints: the literals before each match, after the last
	// A chained span's places hold each match's place in its chain or
	// placeEscaped, and esc the escaped matches' length−3 and distance−1
	// (high, low byte). In sequences, lens, dhi and dlo hold, per match,
	// its length−3 and the high and low bytes of its distance−1.
	chained        bool
	places, esc    []byte
	lens, dhi, dlo []byte
}

// placeEscaped marks a chained span's match written whole.
const placeEscaped = 255

// matches returns the span's match count.
func (sp *Span) matches() int {
	if sp.chained {
		return len(sp.places)
	}
	return len(sp.lens)
}

// tokens appends the span's tokens to dst. buf is the segment's history
// and input, base the member offset of its first byte; ch, the chains
// over buf (chained spans only), asked at increasing positions. ok is
// false when the span does not decode there.
func (sp *Span) tokens(dst []deflate.Token, buf []byte, base int64, ch *deflate.Chains) (_ []deflate.Token, ok bool) {
	b, at, end := sp.lits, int(sp.In-base), int(sp.In-base+sp.Size)
	if at < 0 || end > len(buf) {
		return dst, false
	}
	literals := func() bool {
		v, n := binary.Uvarint(b)
		b = b[n:]
		if n <= 0 || v > uint64(end-at) {
			return false
		}
		for stop := at + int(v); at < stop; at++ {
			dst = append(dst, deflate.LiteralToken(buf[at]))
		}
		return true
	}
	esc := sp.esc
	for k := range sp.matches() {
		if !literals() {
			return dst, false
		}
		var length, dist int
		switch {
		case !sp.chained:
			length, dist = int(sp.lens[k])+3, int(sp.dhi[k])<<8|int(sp.dlo[k])+1
		case sp.places[k] == placeEscaped:
			length, dist = int(esc[0])+3, int(esc[1])<<8|int(esc[2])+1
			esc = esc[3:]
		default:
			if dist, ok = ch.Distance(at, int(sp.places[k])); !ok {
				return dst, false
			}
			length = deflate.ImpliedLength(buf, at, dist)
		}
		if length < 3 || at+length > end || dist > at {
			return dst, false
		}
		dst = append(dst, deflate.MatchToken(length, dist))
		at += length
	}
	return dst, literals() && at == end
}

// chain rewrites spans, in sequences, as chained: each match named by its
// place in the chain of its first byte in buf (whose first byte is member
// offset base), or escaped.
func chain(spans []Span, buf []byte, base int64) {
	ch := deflate.NewChains(buf)
	for i := range spans {
		sp := &spans[i]
		b, at := sp.lits, int(sp.In-base)
		for k := range sp.lens {
			v, n := binary.Uvarint(b)
			b, at = b[n:], at+int(v)
			length, dist := int(sp.lens[k])+3, int(sp.dhi[k])<<8|int(sp.dlo[k])+1
			place, ok := ch.Place(at, dist, placeEscaped)
			if ok && deflate.ImpliedLength(buf, at, dist) == length {
				sp.places = append(sp.places, byte(place))
			} else {
				sp.places = append(sp.places, placeEscaped)
				sp.esc = append(sp.esc, sp.lens[k], sp.dhi[k], sp.dlo[k])
			}
			at += length
		}
		sp.chained, sp.lens, sp.dhi, sp.dlo = true, nil, nil, nil
	}
}

// spanWriter builds spans, in sequences, from a stream's tokens.
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

// findSpans returns the spans of a segment, in sequences: the runs of the
// original's tokens (orig, in input order) that no copy covers, stored
// blocks left out.
func findSpans(orig []origToken, copies []Copy) []Span {
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
	return w.spans
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

// encodeSpans writes a member's spans, in input order and all chained or
// all in sequences, as stored; copies are the member's (chained spans are
// placed by their edges).
func encodeSpans(spans []Span, copies []Copy) ([]byte, error) {
	if len(spans) == 0 {
		return nil, nil
	}
	format := byte(spansSequences)
	if spans[0].chained {
		format = spansChained
	}
	raw := binary.AppendUvarint([]byte{format}, uint64(len(spans)))
	edges := edgeCursor{copies: copies}
	var end int64
	for _, sp := range spans {
		if format == spansChained {
			raw = binary.AppendUvarint(raw, edgeCode(sp.In, edges.after(end), end))
			raw = binary.AppendUvarint(raw, edgeCode(sp.In+sp.Size, edges.next(sp.In), sp.In))
		} else {
			raw = binary.AppendUvarint(raw, uint64(sp.In-end))
		}
		raw = binary.AppendUvarint(raw, uint64(sp.matches()))
		end = sp.In + sp.Size
	}
	parts := []func(*Span) []byte{
		func(sp *Span) []byte { return sp.lits },
		func(sp *Span) []byte { return sp.places },
		func(sp *Span) []byte { return sp.esc },
	}
	if format == spansSequences {
		parts = []func(*Span) []byte{
			func(sp *Span) []byte { return sp.lits },
			func(sp *Span) []byte { return sp.lens },
			func(sp *Span) []byte { return sp.dhi },
			func(sp *Span) []byte { return sp.dlo },
		}
	}
	for _, part := range parts {
		for i := range spans {
			raw = append(raw, part(&spans[i])...)
		}
	}
	return sealFrame(raw)
}

// edgeCursor walks a member's copies (in input order) for the edges a
// chained span is placed by: a span mostly starts where a copy ends and
// ends where the next one starts.
type edgeCursor struct {
	copies []Copy
	k      int // the first copy not before the last offset asked
}

// after returns the end of the first copy from off on, where a span
// after it starts when nothing lies between; -1 for none. Offsets are
// asked in increasing order.
func (c *edgeCursor) after(off int64) int64 {
	for c.k < len(c.copies) && c.copies[c.k].In < off {
		c.k++
	}
	if c.k < len(c.copies) {
		return c.copies[c.k].In + c.copies[c.k].Size
	}
	return -1
}

// next returns the start of the first copy past off, where a span at off
// ends when nothing lies between; -1 for none.
func (c *edgeCursor) next(off int64) int64 {
	for j := c.k; j < len(c.copies); j++ {
		if c.copies[j].In > off {
			return c.copies[j].In
		}
	}
	return -1
}

// edgeCode writes offset x as 0 when it is anchor, else as 1 + its
// distance from base.
func edgeCode(x, anchor, base int64) uint64 {
	if x == anchor {
		return 0
	}
	return 1 + uint64(x-base)
}

var errBadSpans = errors.New("recompress: spans do not decode")

// The formats of a member's spans: matches as sequences (length and
// distance), then chained (places). A rebuild that does not know a
// member's format searches.
const (
	spansSequences = 1
	spansChained   = 2
)

// decodeSpans reads the spans of a member of size input bytes and the
// given copies, checking that each lies inside it, after the one before,
// and that each match is one DEFLATE can write (a chained match's place is
// checked as it is followed).
func decodeSpans(b []byte, size int64, copies []Copy) ([]Span, error) {
	if len(b) == 0 {
		return nil, nil
	}
	// A match takes at most 3 bytes and a few for its literal count and
	// covers at least 3 input bytes: a frame that inflates far past the
	// member is not spans.
	format, n, raw, err := openFrame(b, []byte{spansSequences, spansChained}, uint64(3*size), uint64(size), errBadSpans)
	if err != nil {
		return nil, err
	}
	chained := format == spansChained
	var ok bool
	spans := make([]Span, n)
	gaps := make([]int64, n) // in sequences: bytes since the span before
	counts := make([]int, n) // matches
	var total uint64
	edges := edgeCursor{copies: copies}
	var end int64 // where the span before ends (chained)
	for i := range spans {
		sp := &spans[i]
		var from, to, m uint64
		from, raw, ok = uvarint(raw)
		if ok && chained {
			to, raw, ok = uvarint(raw)
		}
		if ok {
			m, raw, ok = uvarint(raw)
		}
		if !ok || from > uint64(size)+1 || to > uint64(size)+1 || m > uint64(size) {
			return nil, errBadSpans
		}
		counts[i], sp.chained = int(m), chained
		total += m
		if !chained {
			gaps[i] = int64(from)
			continue
		}
		if sp.In = end + int64(from) - 1; from == 0 {
			sp.In = edges.after(end)
		}
		stop := sp.In + int64(to) - 1
		if to == 0 {
			stop = edges.next(sp.In)
		}
		if sp.In < end || stop <= sp.In || stop > size {
			return nil, errBadSpans
		}
		sp.Size, end = stop-sp.In, stop
	}
	if total > uint64(size) {
		return nil, errBadSpans
	}
	lits := make([]int64, n) // literals per span
	for i := range spans {
		sp := &spans[i]
		start := raw
		for range counts[i] + 1 {
			var v uint64
			if v, raw, ok = uvarint(raw); !ok || v > uint64(size) {
				return nil, errBadSpans
			}
			lits[i] += int64(v)
		}
		sp.lits = start[:len(start)-len(raw)]
	}
	if chained {
		if err := splitChained(spans, counts, lits, raw, total); err != nil {
			return nil, err
		}
		return spans, nil
	}
	if err := splitSequences(spans, counts, lits, raw, total); err != nil {
		return nil, err
	}
	end = 0
	for i := range spans {
		sp := &spans[i]
		sp.In = end + gaps[i]
		if sp.Size == 0 || sp.Size > size || sp.In+sp.Size > size {
			return nil, errBadSpans
		}
		end = sp.In + sp.Size
	}
	return spans, nil
}

// splitSequences hands each span its matches' lengths and distances from
// raw, total of them, and sets its size.
func splitSequences(spans []Span, counts []int, lits []int64, raw []byte, total uint64) error {
	if uint64(len(raw)) != 3*total {
		return errBadSpans
	}
	lens, dhi, dlo := raw[:total], raw[total:2*total], raw[2*total:]
	for i := range spans {
		sp := &spans[i]
		m := counts[i]
		sp.lens, sp.dhi, sp.dlo = lens[:m:m], dhi[:m:m], dlo[:m:m]
		lens, dhi, dlo = lens[m:], dhi[m:], dlo[m:]
		sp.Size = lits[i]
		for k := range m {
			if sp.dhi[k] >= 128 {
				return errBadSpans // a distance past 32 KiB
			}
			sp.Size += int64(sp.lens[k]) + 3
		}
	}
	return nil
}

// splitChained hands each span its matches' places and escapes from raw,
// total matches, checking that its size holds its literals and matches.
func splitChained(spans []Span, counts []int, lits []int64, raw []byte, total uint64) error {
	if uint64(len(raw)) < total {
		return errBadSpans
	}
	places, esc := raw[:total], raw[total:]
	for i := range spans {
		sp := &spans[i]
		m := counts[i]
		sp.places, places = places[:m:m], places[m:]
		escaped := 0
		for _, p := range sp.places {
			if p == placeEscaped {
				escaped++
			}
		}
		if len(esc) < 3*escaped {
			return errBadSpans
		}
		sp.esc, esc = esc[:3*escaped:3*escaped], esc[3*escaped:]
		for k := 1; k < len(sp.esc); k += 3 {
			if sp.esc[k] >= 128 {
				return errBadSpans // a distance past 32 KiB
			}
		}
		if sp.Size < lits[i]+3*int64(m) {
			return errBadSpans
		}
	}
	if len(esc) != 0 {
		return errBadSpans
	}
	return nil
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
	buf    []byte // the segment's history and input (segment.buf)
	base   int64  // the member offset of buf[0]
	from   int64  // the segment's first input offset
	chains *deflate.Chains
	toks   []deflate.Token

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
		if sp.In < s.from {
			continue // not this segment's: a damaged recipe
		}
		if sp.chained && s.chains == nil {
			s.chains = deflate.NewChains(s.buf)
		}
		toks, ok := sp.tokens(s.toks[:0], s.buf, s.base, s.chains)
		s.toks = toks
		if !ok {
			continue // searched
		}
		return sp.In, s.toks, true
	}
	if s.cOK {
		s.peeked = false
		return s.cOff, s.cToks, true
	}
	return 0, nil, false
}
