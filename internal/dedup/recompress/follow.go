package recompress

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// Copies: rebuilding without searching. A compress/flate encoder at
// levels 4–9 decides each token from the 32 KiB before it, the 258 bytes
// after and the lazy matcher's state, so inside a file the tokens a layer
// has are, almost everywhere, the tokens of the file compressed on its
// own at the same level. When the files' stored forms are those parses
// (pack's parse frames), a rebuild decodes them with the files' bytes and
// takes their tokens in place of searching (deflate.CompressSegmentFollowing):
// the encoder searches only the tar headers, the small files and the
// heads and tails of files where the layer's tokens differ.
//
// Which stretches agree is learnt once, by the dedup worker's verifying
// rebuild (Check): each segment's original tokens are decoded from the
// blob and compared with the parses of the files the segment holds; runs
// where they agree become the member's Copies, kept only once the segment
// compressed with them reproduced the blob's bits. Copies are true
// stretches of the stream's tokens starting at its token boundaries, so a
// rebuild may follow any subset of them and still write the stream: a
// restore skips a copy whose parse is not at hand (a file stored as zstd,
// or stored again since) or does not check out, and searches there.

// Copy is a stretch of a member's input whose tokens are a stored parse's:
// the Count tokens from token First of the parse of recipe file Source
// (its index in the tar recipe's files), covering Size input bytes from
// In (an offset into the member's input).
type Copy struct {
	In     int64 `json:"i"`
	Size   int64 `json:"b"`
	Source int   `json:"s"`
	First  int   `json:"f"`
	Count  int   `json:"n"`
}

// minCopy is the least input a copy covers: the search that resumes after
// it hashes up to 32 KiB again, so a shorter one saves little. Measured on
// the Debian full profile, 128 covers 2.9% more of the level-6 input (file
// heads left to search: 10.5% -> 7.6%) for 24% more recipe bytes (storage
// ratio -0.8%), and level-6 restores came out 1% and 8% faster in two
// side-by-side runs, within their noise: not worth the bytes.
const minCopy = 512

// minSpannedCopy is the least a copy holds where spans take the rest (no
// search resumes after a copy): matches, for a span takes two to three
// bytes of recipe per match and next to nothing per literal, and a copy a
// few bytes whatever its length. Measured on Go sources (3 MiB in files of
// 64 KiB, tar headers between), recipes come out smallest at 3: 7% below
// 6, 17% below 40.
const minSpannedCopy = 3

// Parse is (a piece of) a stored parse a rebuild may follow: the tokens of
// recipe file Source from its token First, at deflate level Level, whose
// first byte is at offset Off of the blob's uncompressed stream (across
// members). A large file's parse comes in pieces (pack.ParsedStream); a
// copy lies inside one.
type Parse struct {
	Source int
	First  int
	Off    int64
	Level  int
	Tokens []deflate.Token
	size   int64 // input bytes the tokens cover

	// marks are tokens at known input offsets (from Off), in order: the
	// starts of the blocks the parse was decoded from
	// (deflate.Decoder.Marks), so a check, or a segment starting far into
	// the parse, finds a token walking at most a block.
	marks []deflate.Mark
}

// tokenAt returns the index in Tokens of the first token starting at or
// after rel (an offset from Off) and where it starts: from the last mark
// at or before rel (or the start, with no marks).
func (p *Parse) tokenAt(rel int64) (int, int64) {
	k := sort.Search(len(p.marks), func(k int) bool { return p.marks[k].In > rel }) - 1
	i, at := 0, int64(0)
	if k >= 0 {
		i, at = p.marks[k].Token, p.marks[k].In
	}
	for i < len(p.Tokens) && at < rel {
		at += int64(p.Tokens[i].Size())
		i++
	}
	return i, at
}

// Parses hands a rebuild the parses of its input's files as the input is
// produced: Add each file's parse no later than its first byte. A rebuild
// reading the input in order drops the parses it is past.
type Parses struct {
	// KeepHeaders makes a check keep the original's dynamic block
	// headers in the recipe (deflate/header.go): 3–5% faster level-6
	// rebuilds for ~1% more storage, so only with parses on.
	KeepHeaders bool
	// KeepSpans makes a check keep the original's tokens where no copy
	// has them in the recipe (spans.go), so that a restore searches
	// nowhere they and the copies cover.
	KeepSpans bool
	// Release, when set, takes back the tokens of each parse once no
	// segment can follow them any more (pack.Store.ReleaseTokens): the
	// parse was dropped, and every segment that could have taken it is
	// joined.
	Release func([]deflate.Token)

	mu      sync.Mutex
	list    []*Parse // by Off
	retired []*Parse // dropped from list, tokens not yet released
}

// Add records the parse of file source, whose size bytes start at offset
// off of the uncompressed stream; tokens (which cover exactly those bytes)
// must not change afterwards. marks, if any, are tokens at known offsets
// (from off), in order.
func (ps *Parses) Add(source int, off, size int64, level int, tokens []deflate.Token, marks []deflate.Mark) {
	ps.AddPiece(source, 0, off, size, level, tokens, marks)
}

// AddPiece records a piece of the parse of file source: its tokens from
// token first, covering the size bytes from offset off of the uncompressed
// stream, and marks as Add's. Pieces are added in input order, each no
// later than its first byte.
func (ps *Parses) AddPiece(source, first int, off, size int64, level int, tokens []deflate.Token, marks []deflate.Mark) {
	p := &Parse{Source: source, First: first, Off: off, Level: level, Tokens: tokens, size: size, marks: marks}
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
}

// overlapping returns the parses at the given level overlapping input
// [from, to) of the stream and drops those ending at or before from.
func (ps *Parses) overlapping(level int, from, to int64) []*Parse {
	if ps == nil {
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	k := 0
	for k < len(ps.list) && ps.list[k].Off+ps.list[k].size <= from {
		k++
	}
	if ps.Release != nil {
		ps.retired = append(ps.retired, ps.list[:k]...)
	}
	ps.list = ps.list[k:]
	var out []*Parse
	for _, p := range ps.list {
		if p.Off >= to {
			break
		}
		if p.Level == level && p.size > 0 {
			out = append(out, p)
		}
	}
	return out
}

// release hands the tokens of the parses dropped so far that end at or
// before offset upTo of the stream to Release. A segment takes the parses
// overlapping its input when it is fed, and parses are dropped once a
// segment is fed past them, so when the segments are joined through upTo
// (each joined after it was compressed) none is left to follow those.
func (ps *Parses) release(upTo int64) {
	if ps == nil || ps.Release == nil {
		return
	}
	ps.mu.Lock()
	var done []*Parse
	k := 0
	for _, p := range ps.retired {
		if p.Off+p.size <= upTo {
			done = append(done, p)
		} else {
			ps.retired[k] = p
			k++
		}
	}
	clear(ps.retired[k:])
	ps.retired = ps.retired[:k]
	ps.mu.Unlock()
	for _, p := range done {
		ps.Release(p.Tokens)
	}
}

// copySource is a deflate.TokenSource over a segment's copies.
type copySource struct {
	copies []Copy
	toks   [][]deflate.Token
}

func (s *copySource) Next() (int64, []deflate.Token, bool) {
	if len(s.copies) == 0 {
		return 0, nil, false
	}
	c, ts := s.copies[0], s.toks[0]
	s.copies, s.toks = s.copies[1:], s.toks[1:]
	return c.In, ts, true
}

// follow returns the source of the copies a restore can take, of those a
// segment's recipe lists: each must name a parse at hand whose tokens
// cover exactly the copy's bytes, from its place. base is the member's
// offset in the stream. nil when none is left.
func follow(copies []Copy, parses []*Parse, base int64) deflate.TokenSource {
	if len(copies) == 0 || len(parses) == 0 {
		return nil
	}
	bySource := make(map[int][]*Parse, len(parses))
	for _, p := range parses {
		bySource[p.Source] = append(bySource[p.Source], p)
	}
	// Copies come in input order, so each parse is walked once, from where
	// the last copy in it ended (a cursor: next token, its offset), or to
	// the first copy from the mark before it; the walk also checks each
	// copy's size.
	type cursor struct {
		i  int
		at int64
	}
	cursors := make(map[*Parse]*cursor, len(parses))
	src := &copySource{}
	for _, c := range copies {
		var p *Parse
		for _, q := range bySource[c.Source] {
			if q.First <= c.First && c.First < q.First+len(q.Tokens) {
				p = q
				break
			}
		}
		if p == nil || c.Count <= 0 || c.First+c.Count > p.First+len(p.Tokens) {
			continue
		}
		rel := c.In + base - p.Off
		cu := cursors[p]
		if cu == nil || rel < cu.at {
			cu = &cursor{}
			cu.i, cu.at = p.tokenAt(rel)
			cursors[p] = cu
		}
		for cu.i < len(p.Tokens) && cu.at < rel {
			cu.at += int64(p.Tokens[cu.i].Size())
			cu.i++
		}
		if p.First+cu.i != c.First || cu.at != rel {
			continue
		}
		ts := p.Tokens[cu.i : cu.i+c.Count]
		var n int64
		for _, t := range ts {
			n += int64(t.Size())
		}
		cu.i, cu.at = cu.i+c.Count, cu.at+n
		if n != c.Size {
			continue
		}
		src.copies = append(src.copies, c)
		src.toks = append(src.toks, ts)
	}
	if len(src.copies) == 0 {
		return nil
	}
	return src
}

// inSegment returns the items of a member's list (in input order, at
// offsets in) that start in the segment from from to to (-1: the
// member's end): its copies, spans or block headers.
func inSegment[T any](items []T, in func(*T) int64, from, to int64) []T {
	i := sort.Search(len(items), func(i int) bool { return in(&items[i]) >= from })
	j := len(items)
	if to >= 0 {
		j = sort.Search(len(items), func(j int) bool { return in(&items[j]) >= to })
	}
	return items[i:j]
}

// origToken is one token of the original stream at its input offset; a
// stored block's bytes are one token of dist -1.
type origToken struct {
	off    int64
	tok    deflate.Token
	n      int32
	stored bool
}

// originalTokens decodes the tokens the original member has for the
// segment s (when tokens is set), and its dynamic blocks' headers: its
// bits from s.from.Bit, read from original at bodyStart, with s.hist as
// the output before.
func originalTokens(original io.ReaderAt, bodyStart int64, s *segment, tokens bool) ([]origToken, []deflate.BlockHeader, error) {
	end := s.from.In + int64(len(s.in))
	if s.to != nil {
		end = s.to.In
	}
	// DEFLATE never takes more than its input plus 5 bytes per stored
	// block of 64 KiB, and a few bytes of block headers.
	n := end - s.from.In
	buf := make([]byte, n+n/1000+1024)
	k, err := original.ReadAt(buf, bodyStart+s.from.Bit/8)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("recompress: read original: %w", err)
	}
	var dec deflate.Decoder
	if err := dec.ResetAt(buf[:k], uint(s.from.Bit%8), s.from.In); err != nil {
		return nil, nil, err
	}
	dst := append(make([]byte, 0, len(s.hist)+int(n)+64<<10), s.hist...)
	var out []origToken
	var headers []deflate.BlockHeader
	for {
		b, d, err := dec.Next(dst)
		dst = d
		if errors.Is(err, io.EOF) {
			return out, headers, nil
		}
		if err != nil {
			return nil, nil, err
		}
		if b.Type == deflate.BlockDynamic {
			if h, err := deflate.HeaderOf(buf[:k], b); err == nil {
				headers = append(headers, h)
			}
		}
		at := b.In
		if !tokens {
			at += int64(b.Size)
		} else if b.Type == deflate.BlockStored {
			out = append(out, origToken{off: at, n: int32(b.Size), stored: true})
			at += int64(b.Size)
		} else {
			for _, t := range b.Tokens {
				out = append(out, origToken{off: at, tok: t, n: int32(t.Size())})
				at += int64(t.Size())
			}
		}
		if at >= end {
			return out, headers, nil
		}
	}
}

// findCopies returns the runs where the original's tokens (orig, in input
// order) are those of the parses, as copies in input order. base is the
// member's offset in the stream; end is the segment's. With spans, a run
// is kept by its matches (minSpannedCopy) rather than its size.
func findCopies(orig []origToken, parses []*Parse, base, end int64, spans bool) []Copy {
	var out []Copy
	i := 0
	for _, p := range parses {
		lo, hi := max(p.Off-base, 0), min(p.Off-base+p.size, end)
		for i < len(orig) && orig[i].off < lo {
			i++
		}
		if i == len(orig) {
			break
		}
		j, at := p.tokenAt(orig[i].off + base - p.Off)
		at += p.Off - base // as a member offset
		run := Copy{Source: p.Source, First: -1}
		matches := 0
		flush := func() {
			if run.First >= 0 && (!spans && run.Size >= minCopy || spans && matches >= minSpannedCopy) {
				out = append(out, run)
			}
			run, matches = Copy{Source: p.Source, First: -1}, 0
		}
		for i < len(orig) && j < len(p.Tokens) && orig[i].off < hi {
			o := orig[i]
			switch {
			case o.off < at:
				flush()
				i++
				continue
			case at < o.off:
				flush()
				at += int64(p.Tokens[j].Size())
				j++
				continue
			}
			t := p.Tokens[j]
			if o.stored || o.tok != t || o.off+int64(o.n) > hi {
				flush() // a stored block's, or another token
			} else {
				if run.First < 0 {
					run.In, run.First = o.off, p.First+j
				}
				run.Size += int64(o.n)
				run.Count++
				if t.IsMatch() {
					matches++
				}
			}
			i++
			at += int64(t.Size())
			j++
		}
		flush()
	}
	sort.Slice(out, func(a, b int) bool { return out[a].In < out[b].In })
	return out
}
