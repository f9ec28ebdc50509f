package parsebench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// Rebuild plans (issue 27's second step). A level-6 member's tokens are a
// sequence of stretches: copied from the parse of a file compressed on its
// own (where the layer's tokens agree with it), or searched again by the
// encoder from the end of the stretch before (deflate.SearchStretch). A
// copy ends where the window index is known, so the search after it can
// restart there (any token boundary can). A file's parse is its raw
// deflate written with deflate.Writer.KeepTokens: a stored block would
// hide the tokens. MeasurePlan builds every layer's plan, proves it (the
// planned tokens are the layer's own; a stored block of the layer's is
// covered exactly), and times what a rebuild from the plan costs (search
// the searched stretches, decode the copied files' parses, write every
// block) against today's (search the whole member, write every block).

// PlanOptions configures MeasurePlan.
type PlanOptions struct {
	Log io.Writer
	// MinCopy is the least a copied stretch must cover to be worth the
	// search restart after it (which hashes 32 KiB of history).
	MinCopy int64
	// CrossLayer also copies the tokens an earlier layer had for the same
	// tar entry (headers and contents) or the same file's contents,
	// before falling back to the file's own parse.
	CrossLayer bool
}

// PlanReport sums the plans of the layers measured.
type PlanReport struct {
	Layers     int     `json:"layers"`
	TarBytes   int64   `json:"tar_bytes"`
	CopyBytes  int64   `json:"copy_bytes"`
	Copies     int     `json:"copies"`
	Searches   int     `json:"searches"`
	Failed     int     `json:"failed"` // layers whose planned tokens differ
	PlanBytes  int64   `json:"plan_bytes"`
	FullSecs   float64 `json:"full_search_seconds"`
	SearchSecs float64 `json:"stretch_search_seconds"`
	CopySecs   float64 `json:"copy_decode_seconds"`
	EncodeSecs float64 `json:"encode_seconds"`
	// DecodedBytes is what decoding the copied files' parses inflated;
	// SearchBytes what the searched stretches cover.
	DecodedBytes int64 `json:"decoded_bytes"`
	SearchBytes  int64 `json:"search_bytes"`
	// The searched bytes by where they are.
	SearchSmallFiles int64 `json:"search_small_files"`
	SearchLargeFiles int64 `json:"search_large_files"`
	SearchOutside    int64 `json:"search_outside_files"`
	// Of SearchLargeFiles: files not copied at all, and the heads and
	// tails of those copied.
	LargeUncopied int64 `json:"large_uncopied"`
	LargeHeads    int64 `json:"large_heads"`
	LargeTails    int64 `json:"large_tails"`
	// StoredBytes are in stored blocks: no tokens to compare.
	StoredBytes int64 `json:"stored_bytes"`
	OwnBytes    int64 `json:"own_deflate_bytes"`
	// With CrossLayer: entries and files whose tokens came from an
	// earlier layer, and what storing the tokens an entry's first layer
	// had, where its own parse does not give them, would cost (literal
	// runs by length, matches by length and distance, as uvarints).
	CrossEntries    int   `json:"cross_entries,omitempty"`
	CrossFiles      int   `json:"cross_files,omitempty"`
	CrossStoreBytes int64 `json:"cross_store_bytes,omitempty"`
	// A rebuild by deflate.CompressFollowing from the plan: layers whose
	// stream it wrote bit for bit, layers it refused, its time, and
	// today's (level 6 over the whole member). FollowSpeedup is
	// Level6Secs / (CopySecs+FollowSecs).
	FollowExact   int     `json:"follow_exact"`
	FollowFailed  int     `json:"follow_failed"`
	FollowSecs    float64 `json:"follow_seconds"`
	Level6Secs    float64 `json:"level6_seconds"`
	FollowSpeedup float64 `json:"follow_speedup"`
	// Speedup is (FullSecs+EncodeSecs) / (SearchSecs+CopySecs+EncodeSecs):
	// a planned rebuild's speed per core against today's.
	Speedup float64 `json:"speedup"`
}

// tok is one token of a parse at its offset.
type tok struct {
	off    int64
	length int32
	dist   int32 // 0 for a literal
}

// stretch is one part of a plan: searched (file -1), or copied from src,
// a parse whose offsets are relative to base.
type stretch struct {
	off, n int64
	file   int // index into files, -1 for a searched stretch
	src    []tok
	base   int64
}

// MeasurePlan plans and proves every layer (compress/flate level 6 only).
func MeasurePlan(ctx context.Context, layers []Layer, opts PlanOptions) (*PlanReport, error) {
	r := &PlanReport{}
	st := &planState{own: map[[32]byte][]byte{}, entries: map[[32]byte]storedParse{}, contents: map[[32]byte]storedParse{}}
	for _, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t := time.Now()
		if err := planLayer(l, r, st, opts); err != nil {
			return nil, fmt.Errorf("parsebench: plan %s: %w", l.Name, err)
		}
		if planned := r.SearchSecs + r.CopySecs + r.EncodeSecs; planned > 0 {
			r.Speedup = (r.FullSecs + r.EncodeSecs) / planned
		}
		if f := r.CopySecs + r.FollowSecs; f > 0 {
			r.FollowSpeedup = r.Level6Secs / f
		}
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, "plan: %s: %.1fs\n", l.Name, time.Since(t).Seconds())
		}
	}
	return r, nil
}

func tokensOf(stream []byte, dst []byte) ([]tok, []byte, error) {
	var ts []tok
	out, _, err := Inflate(dst, stream, Visitor{Token: func(t Token) {
		switch t.Kind {
		case Match:
			ts = append(ts, tok{t.Off, int32(t.Len), int32(t.Dist)})
		case Literal:
			ts = append(ts, tok{t.Off, 1, 0})
		default:
			// Stored bytes: no tokens; nothing agrees with them.
			ts = append(ts, tok{t.Off, int32(t.Len), -1})
		}
	}})
	return ts, out, err
}

// planState is what a layer's plan may draw on from the layers before.
type planState struct {
	own map[[32]byte][]byte // a file's own raw deflate
	// entries and contents are the tokens (packed) the first layer to
	// hold a tar entry, or a file's contents, had for it.
	entries, contents map[[32]byte]storedParse
}

// packToks keeps a parse in 4 bytes per token: 0 for a literal,
// length<<16|distance for a match, 1<<31|n for n stored bytes.
func packToks(ts []tok) []uint32 {
	out := make([]uint32, len(ts))
	for i, t := range ts {
		switch {
		case t.dist < 0:
			out[i] = 1<<31 | uint32(t.length)
		case t.dist > 0:
			out[i] = uint32(t.length)<<16 | uint32(t.dist)
		}
	}
	return out
}

// unpackToks undoes packToks; the first token is at offset first.
func unpackToks(p []uint32, first int64) []tok {
	out := make([]tok, len(p))
	off := first
	for i, v := range p {
		switch {
		case v>>31 == 1:
			out[i] = tok{off, int32(v &^ (1 << 31)), -1}
		case v == 0:
			out[i] = tok{off, 1, 0}
		default:
			out[i] = tok{off, int32(v >> 16), int32(v & 0xffff)}
		}
		off += int64(out[i].length)
	}
	return out
}

// firstTok is the index of the first token of ts at or after off.
func firstTok(ts []tok, off int64) int {
	return sort.Search(len(ts), func(i int) bool { return ts[i].off >= off })
}

// stored is one recorded parse: its packed tokens and the offset of the
// first, relative to the region it covers.
type storedParse struct {
	toks  []uint32
	first int64
}

func planLayer(l Layer, r *PlanReport, st *planState, opts PlanOptions) error {
	own := st.own
	blob, err := readAll(l)
	if err != nil {
		return err
	}
	hdr, err := gzipHeaderLen(blob)
	if err != nil {
		return err
	}
	orig, out, err := tokensOf(blob[hdr:], nil)
	if err != nil {
		return err
	}
	files, err := tarFiles(out)
	if err != nil {
		return err
	}
	r.Layers++
	r.TarBytes += int64(len(out))

	var plan []stretch
	i := 0 // first original token not before the file
	// entryStart[fi] is where file fi's tar entry starts: after the
	// previous file's padded contents (headers of entries without
	// contents in between are part of it).
	entryStart := make([]int64, len(files))
	for fi := 1; fi < len(files); fi++ {
		p := files[fi-1]
		entryStart[fi] = p.off + (p.size+511)&^511
	}
	// ownParse is the file's raw deflate written on its own: what a
	// rebuild decodes the file's bytes and tokens from.
	ownParse := func(f file) ([]byte, error) {
		if enc, ok := own[f.sum]; ok {
			return enc, nil
		}
		var b bytes.Buffer
		w, err := deflate.NewWriter(&b, 6)
		if err != nil {
			return nil, err
		}
		w.KeepTokens()
		w.Write(out[f.off : f.off+f.size])
		if err := w.Close(); err != nil {
			return nil, err
		}
		own[f.sum] = b.Bytes()
		r.OwnBytes += int64(b.Len())
		return b.Bytes(), nil
	}
	fromEarlier := func(sp storedParse, base, size int64, fi int) []stretch {
		src := unpackToks(sp.toks, sp.first)
		return copies(orig[firstTok(orig, base):], src, base, size, fi, opts.MinCopy)
	}
	for fi, f := range files {
		if opts.CrossLayer {
			rs, re := entryStart[fi], f.off+f.size
			if _, err := ownParse(f); err != nil {
				return err
			}
			if sp, ok := st.entries[sha256.Sum256(out[rs:re])]; ok {
				plan = append(plan, fromEarlier(sp, rs, re-rs, fi)...)
				r.CrossEntries++
				continue
			}
			if sp, ok := st.contents[f.sum]; ok {
				plan = append(plan, fromEarlier(sp, f.off, f.size, fi)...)
				r.CrossFiles++
				continue
			}
		}
		if f.size < opts.MinCopy {
			continue
		}
		enc, err := ownParse(f)
		if err != nil {
			return err
		}
		ot, _, err := tokensOf(enc, make([]byte, 0, f.size))
		if err != nil {
			return err
		}
		for i < len(orig) && orig[i].off < f.off {
			i++
		}
		plan = append(plan, copies(orig[i:], ot, f.off, f.size, fi, opts.MinCopy)...)
	}
	// Searched stretches fill the gaps.
	var full []stretch
	at := int64(0)
	for _, c := range plan {
		if c.off > at {
			full = append(full, stretch{off: at, n: c.off - at, file: -1})
		}
		full = append(full, c)
		at = c.off + c.n
	}
	if at < int64(len(out)) {
		full = append(full, stretch{off: at, n: int64(len(out)) - at, file: -1})
	}
	if opts.CrossLayer {
		recordEntries(r, st, orig, out, files, entryStart, full)
	}
	if !opts.CrossLayer {
		searchedWhere(r, plan, files, int64(len(out)), opts.MinCopy)
	}

	// Time the searched stretches as a rebuild runs them (tokens go
	// straight on), then run them again keeping the tokens, to prove the
	// plan.
	search := func(s stretch, emit func([]deflate.Token) error) error {
		x, y := s.off, s.off+s.n
		final := y+deflate.StretchLookahead > int64(len(out))
		in := out[x:]
		if !final {
			in = out[x : y+deflate.StretchLookahead]
		}
		win := int32(0)
		if x > 0 {
			win = deflate.WindowAt(x)
		}
		if err := deflate.SearchStretch(6, out[max(0, x-2*32768):x], win, in, int(s.n), final, emit); err != nil {
			return fmt.Errorf("stretch %d+%d: %w", x, s.n, err)
		}
		return nil
	}
	t := time.Now()
	for _, s := range full {
		if s.file >= 0 {
			continue
		}
		if err := search(s, func([]deflate.Token) error { return nil }); err != nil {
			return err
		}
		r.Searches++
		r.SearchBytes += s.n
	}
	r.SearchSecs += time.Since(t).Seconds()
	var got []tok
	for _, s := range full {
		if s.file >= 0 {
			continue
		}
		pos := s.off
		err := search(s, func(ts []deflate.Token) error {
			for _, tk := range ts {
				t := tok{pos, 1, 0}
				if tk.IsMatch() {
					t = tok{pos, int32(tk.Length()), int32(tk.Dist())}
				}
				got = append(got, t)
				pos += int64(t.length)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	// What a rebuild pays to read the copied files' parses: decoding their
	// stored raw deflate.
	t = time.Now()
	var dec deflate.Decoder
	var buf []byte
	decoded := map[int]bool{}
	for _, s := range full {
		if s.file < 0 {
			continue
		}
		r.Copies++
		r.CopyBytes += s.n
		if decoded[s.file] {
			continue
		}
		decoded[s.file] = true
		if buf, err = decodeAll(&dec, own[files[s.file].sum], buf[:0]); err != nil {
			return err
		}
		r.DecodedBytes += int64(len(buf))
	}
	r.CopySecs += time.Since(t).Seconds()
	// And to Huffman-code every block again: timed on the layer's own
	// blocks, which hold the same tokens.
	enc, err := reencodeTime(blob[hdr:])
	if err != nil {
		return err
	}
	r.EncodeSecs += enc
	r.PlanBytes += int64(len(full)) * 6

	// The planned tokens, in stream order, must be the member's.
	var planned []tok
	gi := 0
	for _, s := range full {
		if s.file < 0 {
			for gi < len(got) && got[gi].off < s.off+s.n {
				planned = append(planned, got[gi])
				gi++
			}
			continue
		}
		for _, o := range s.src {
			if p := s.base + o.off; p >= s.off && p < s.off+s.n {
				planned = append(planned, tok{p, o.length, o.dist})
			}
		}
	}
	if !sameToks(planned, orig, r) {
		r.Failed++
	}

	t = time.Now()
	err = deflate.SearchStretch(6, nil, 0, out, len(out), true, func([]deflate.Token) error { return nil })
	r.FullSecs += time.Since(t).Seconds()
	if err != nil {
		return err
	}

	// A real rebuild, against today's: one encoder following the plan
	// (the copies' tokens given, the rest searched) must write the
	// layer's stream bit for bit.
	src := &planSource{}
	for _, s := range full {
		if s.file < 0 {
			continue
		}
		var ts []deflate.Token
		for _, o := range s.src {
			p := s.base + o.off
			switch {
			case p < s.off || p >= s.off+s.n:
				continue
			case o.dist > 0:
				ts = append(ts, deflate.MatchToken(int(o.length), int(o.dist)))
			case o.dist == 0:
				ts = append(ts, deflate.LiteralToken(out[p]))
			default:
				// A stored block of the layer's: its bytes, as literals,
				// stand for tokens the encoder would store again.
				for q := p; q < p+int64(o.length); q++ {
					ts = append(ts, deflate.LiteralToken(out[q]))
				}
			}
		}
		src.offs = append(src.offs, s.off)
		src.tokens = append(src.tokens, ts)
	}
	var rebuilt bytes.Buffer
	rebuilt.Grow(len(blob))
	t = time.Now()
	if err := deflate.CompressFollowing(&rebuilt, 6, out, src); err != nil {
		r.FollowFailed++
	}
	r.FollowSecs += time.Since(t).Seconds()
	if bytes.HasPrefix(blob[hdr:], rebuilt.Bytes()) && rebuilt.Len() > 0 {
		r.FollowExact++
	}
	t = time.Now()
	w, err := deflate.NewWriter(io.Discard, 6)
	if err != nil {
		return err
	}
	w.Write(out)
	err = w.Close()
	r.Level6Secs += time.Since(t).Seconds()
	return err
}

// planSource is a deflate.TokenSource over a plan's copies.
type planSource struct {
	offs   []int64
	tokens [][]deflate.Token
}

func (s *planSource) Next() (int64, []deflate.Token, bool) {
	if len(s.offs) == 0 {
		return 0, nil, false
	}
	off, ts := s.offs[0], s.tokens[0]
	s.offs, s.tokens = s.offs[1:], s.tokens[1:]
	return off, ts, true
}

// sameToks reports whether the planned tokens are the stream's: equal
// where the stream has tokens, and covering each stored block exactly,
// since a stored block keeps its bytes and not the tokens the encoder had
// for them.
func sameToks(planned, orig []tok, r *PlanReport) bool {
	j := 0
	for _, o := range orig {
		if o.dist >= 0 {
			if j >= len(planned) || planned[j] != o {
				return false
			}
			j++
			continue
		}
		end := o.off + int64(o.length)
		for j < len(planned) && planned[j].off < end {
			j++
		}
		if j > 0 && planned[j-1].off+int64(planned[j-1].length) != end {
			return false
		}
		r.StoredBytes += int64(o.length)
	}
	return j == len(planned)
}

// decodeAll inflates a raw DEFLATE stream into buf, token by token.
func decodeAll(d *deflate.Decoder, stream, buf []byte) ([]byte, error) {
	d.Reset(stream)
	return d.DecodeAll(buf, nil)
}

// reencodeTime is how long writing every block of stream again takes,
// given its tokens.
func reencodeTime(stream []byte) (float64, error) {
	d := deflate.NewDecoder(stream)
	w := deflate.NewBlockWriter(io.Discard, 0)
	var buf []byte
	var spent time.Duration
	for {
		b, out, err := d.Next(buf)
		buf = out
		if errors.Is(err, io.EOF) {
			return spent.Seconds(), w.Flush()
		}
		if err != nil {
			return 0, err
		}
		t := time.Now()
		if err := w.Write(b); err != nil {
			return 0, err
		}
		spent += time.Since(t)
	}
}

// copies returns the stretches of the region [base, base+size) of file
// fi whose tokens in the layer (orig, from the first token at or after
// base) are those of src (offsets relative to base): runs where both
// parses agree, each cut after its last token whose end has a known
// window index, kept when at least minCopy long.
func copies(orig, src []tok, base, size int64, fi int, minCopy int64) []stretch {
	var out []stretch
	start, cut := int64(-1), int64(-1)
	closeRun := func() {
		if start >= 0 && cut-start >= minCopy {
			out = append(out, stretch{off: start, n: cut - start, file: fi, src: src, base: base})
		}
		start, cut = -1, -1
	}
	i, j := 0, 0
	end := base + size
	for i < len(orig) && j < len(src) && orig[i].off < end {
		po, pw := orig[i].off, base+src[j].off
		switch {
		case po < pw:
			closeRun()
			i++
			continue
		case pw < po:
			closeRun()
			j++
			continue
		}
		o, w := orig[i], src[j]
		if o.dist < 0 {
			// A stored block keeps bytes, not tokens: a copy runs
			// through it when src has a token boundary at its end too
			// (the rebuild writes it from the bytes).
			e := po + int64(o.length)
			k := j
			for k < len(src) && base+src[k].off < e {
				k++
			}
			if e > end || k < len(src) && base+src[k].off != e || k == len(src) && e != end {
				closeRun()
				i++
				continue
			}
			if start < 0 {
				start = po
			}
			if deflate.WindowAt(e) >= 0 {
				cut = e
			}
			i, j = i+1, k
			continue
		}
		if o.length != w.length || o.dist != w.dist {
			closeRun()
			i++
			j++
			continue
		}
		if start < 0 {
			start = po
		}
		if e := po + int64(o.length); deflate.WindowAt(e) >= 0 {
			cut = e
		}
		i++
		j++
	}
	closeRun()
	return out
}

// recordEntries keeps, for later layers, the tokens this layer has for
// each tar entry and file contents not seen before, and prices storing
// those an entry's own parse does not give (the tokens outside the plan's
// copies).
func recordEntries(r *PlanReport, st *planState, orig []tok, out []byte, files []file, entryStart []int64, full []stretch) {
	k := 0 // first stretch that may overlap the entry
	for fi, f := range files {
		rs, re := entryStart[fi], f.off+f.size
		key := sha256.Sum256(out[rs:re])
		if _, ok := st.entries[key]; ok {
			continue
		}
		i, j := firstTok(orig, rs), firstTok(orig, re)
		st.entries[key] = storedParse{packToks(orig[i:j]), orig[min(i, len(orig)-1)].off - rs}
		if _, ok := st.contents[f.sum]; !ok {
			c := firstTok(orig, f.off)
			st.contents[f.sum] = storedParse{packToks(orig[c:j]), orig[min(c, len(orig)-1)].off - f.off}
		}
		lit := int64(0)
		flush := func() {
			if lit > 0 {
				r.CrossStoreBytes += uvarintLen(uint64(lit) << 1)
				lit = 0
			}
		}
		for _, t := range orig[i:j] {
			for k < len(full) && full[k].off+full[k].n <= t.off {
				k++
			}
			if k < len(full) && full[k].file >= 0 && full[k].off <= t.off && t.off+int64(t.length) <= full[k].off+full[k].n {
				flush()
				continue
			}
			switch {
			case t.dist == 0:
				lit++
			case t.dist > 0:
				flush()
				r.CrossStoreBytes += uvarintLen(uint64(t.length-3)<<1|1) + uvarintLen(uint64(t.dist-1))
			default:
				flush() // stored bytes: the rebuild writes them from the bytes
			}
		}
		flush()
	}
}

// searchedWhere adds where plan's searched bytes are: in small files, in
// files large enough to copy (not copied at all, heads, tails), or outside
// files (tar headers, padding).
func searchedWhere(r *PlanReport, plan []stretch, files []file, tarSize, minCopy int64) {
	copied := make([]int64, len(files))
	first, last := make([]int64, len(files)), make([]int64, len(files))
	for _, c := range plan {
		if copied[c.file] == 0 {
			first[c.file] = c.off
		}
		copied[c.file] += c.n
		last[c.file] = c.off + c.n
	}
	var inFiles int64
	for fi, f := range files {
		inFiles += f.size
		if f.size < minCopy {
			r.SearchSmallFiles += f.size
		} else {
			r.SearchLargeFiles += f.size - copied[fi]
			if copied[fi] == 0 {
				r.LargeUncopied += f.size
			} else {
				r.LargeHeads += first[fi] - f.off
				r.LargeTails += f.off + f.size - last[fi]
			}
		}
	}
	r.SearchOutside += tarSize - inFiles
}
