package parsebench

import "encoding/binary"

// entry is one token of a parse, packed in 32 bits with its kind in the
// top two bits: a run of n literals (adjacent literals merge into one run,
// since only which bytes are literals matters to agreement), a match as
// length<<16 | distance, a match reaching back before the start of the
// range (same layout), or n bytes covered by a token that starts before
// the range.
type entry uint32

const (
	kindLit     entry = 0 << 30
	kindMatch   entry = 1 << 30
	kindForeign entry = 2 << 30
	kindBack    entry = 3 << 30
	kindMask    entry = 3 << 30
	maxRun            = 1<<30 - 1
)

func matchEntry(length, dist int) entry { return kindMatch | entry(length)<<16 | entry(dist) }

func (e entry) kind() entry { return e & kindMask }

// size is the number of bytes the entry covers.
func (e entry) size() int64 {
	if k := e.kind(); k == kindMatch || k == kindBack {
		return int64(e >> 16 & 0x1ff)
	}
	return int64(e &^ kindMask)
}

func (e entry) dist() int { return int(e & 0xffff) }

// parse is the token sequence of a stream or of a byte range of it; each
// entry starts where the previous one ends.
type parse []entry

// addRun appends n bytes of kind k (kindLit or kindForeign), merging
// literals with a literal run before them.
func (p *parse) addRun(k entry, n int64) {
	for n > 0 {
		if k == kindLit && len(*p) > 0 {
			if last := (*p)[len(*p)-1]; last.kind() == kindLit && last.size() < maxRun {
				add := min(n, maxRun-last.size())
				(*p)[len(*p)-1] += entry(add)
				n -= add
				continue
			}
		}
		add := min(n, maxRun)
		*p = append(*p, k|entry(add))
		n -= add
	}
}

// token appends a decoded token; stored bytes count as literals.
func (p *parse) token(t Token) {
	if t.Kind == Match {
		*p = append(*p, matchEntry(t.Len, t.Dist))
		return
	}
	p.addRun(kindLit, int64(t.Len))
}

// cursor extracts the parses of increasing, non-overlapping ranges of a
// stream's parse in one pass over it.
type cursor struct {
	p   parse
	i   int   // first entry that may overlap the next range
	pos int64 // offset of entry i
}

// extract returns the parse of bytes [s, e) relative to s: literal runs
// are cut to the range; a match starting before s becomes foreign, one
// reaching back before s becomes kindBack; a match running past e is kept
// whole.
func (c *cursor) extract(s, e int64) parse {
	for c.i < len(c.p) && c.pos+c.p[c.i].size() <= s {
		c.pos += c.p[c.i].size()
		c.i++
	}
	var out parse
	pos := c.pos
	for i := c.i; i < len(c.p) && pos < e; i++ {
		en := c.p[i]
		end := pos + en.size()
		lo, hi := max(pos, s), min(end, e)
		switch {
		case en.kind() == kindLit:
			out.addRun(kindLit, hi-lo)
		case pos < s:
			out = append(out, kindForeign|entry(hi-lo))
		case int64(en.dist()) > pos-s:
			out = append(out, en&^kindMask|kindBack)
		default:
			out = append(out, en)
		}
		pos = end
	}
	return out
}

// agree calls fn with the intervals of [0, size) where parses a and b
// agree, in order: bytes that are literals in both, and the bytes of a
// match both have at the same offset with the same length and distance.
// Matches reaching back before the range agree only with back set: they
// copy bytes from outside the range, which two layers need not share.
func agree(a, b parse, size int64, fn func(lo, hi int64, back bool)) {
	var ia, ib int
	var pa, pb int64
	for ia < len(a) && ib < len(b) && pa < size && pb < size {
		ea, eb := a[ia], b[ib]
		qa, qb := pa+ea.size(), pb+eb.size()
		switch {
		case ea.kind() == kindLit && eb.kind() == kindLit:
			if lo, hi := max(pa, pb), min(qa, qb, size); lo < hi {
				fn(lo, hi, false)
			}
		case (ea.kind() == kindMatch || ea.kind() == kindBack) && ea == eb && pa == pb:
			fn(pa, min(qa, size), ea.kind() == kindBack)
		}
		if qa <= qb {
			ia, pa = ia+1, qa
		}
		if qb <= qa {
			ib, pb = ib+1, qb
		}
	}
}

// interval is a byte range [lo, hi).
type interval struct{ lo, hi int64 }

// intervals collects agreeing intervals, merging adjacent ones.
type intervals []interval

func (s *intervals) add(lo, hi int64) {
	if n := len(*s); n > 0 && (*s)[n-1].hi == lo {
		(*s)[n-1].hi = hi
		return
	}
	*s = append(*s, interval{lo, hi})
}

// Exceptions prices the tokens of a layer its stored parses do not give.
type Exceptions struct {
	// Runs are maximal sequences of consecutive uncovered tokens, Tokens
	// their tokens (a literal run counts once) and Bytes the bytes they
	// produce.
	Runs   int64 `json:"runs"`
	Tokens int64 `json:"tokens"`
	Bytes  int64 `json:"bytes"`
	// Size estimates the list's encoded size: per run, a uvarint of the
	// gap since the previous run and one of its token count; per token a
	// uvarint of n<<1 for n literals, or of (length-3)<<1|1 and one of
	// distance-1 for a match. No entropy coding.
	Size int64 `json:"size"`
}

// exceptions walks a layer's parse p against the covered intervals (in
// order, absolute offsets): a match is covered if one interval holds all
// of it, a literal byte if an interval holds it. Everything else is an
// exception token.
func exceptions(p parse, covered []interval) Exceptions {
	var x Exceptions
	var pos, runEnd int64
	var runTokens int64
	open := false
	k := 0
	closeRun := func() {
		if open {
			x.Size += uvarintLen(uint64(runTokens))
			open = false
		}
	}
	addToken := func(lo, hi int64, cost int64) {
		if !open {
			x.Runs++
			x.Size += uvarintLen(uint64(lo - runEnd))
			open, runTokens = true, 0
		}
		runTokens++
		x.Tokens++
		x.Bytes += hi - lo
		x.Size += cost
		runEnd = hi
	}
	for _, e := range p {
		end := pos + e.size()
		if e.kind() == kindMatch {
			for k < len(covered) && covered[k].hi <= pos {
				k++
			}
			if k < len(covered) && covered[k].lo <= pos && end <= covered[k].hi {
				closeRun()
			} else {
				l, d := uint64(e.size()), uint64(e.dist())
				addToken(pos, end, uvarintLen((l-3)<<1|1)+uvarintLen(d-1))
			}
			pos = end
			continue
		}
		for x0 := pos; x0 < end; {
			for k < len(covered) && covered[k].hi <= x0 {
				k++
			}
			if k < len(covered) && covered[k].lo <= x0 {
				closeRun()
				x0 = min(end, covered[k].hi)
				continue
			}
			hi := end
			if k < len(covered) {
				hi = min(end, covered[k].lo)
			}
			addToken(x0, hi, uvarintLen(uint64(hi-x0)<<1))
			x0 = hi
		}
		pos = end
	}
	closeRun()
	return x
}

func uvarintLen(v uint64) int64 {
	var b [binary.MaxVarintLen64]byte
	return int64(binary.PutUvarint(b[:], v))
}
