package parsebench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

type stretch struct {
	off, n int64
	file   int // index into files, -1 for a searched stretch
}

// MeasurePlan plans and proves every layer (compress/flate level 6 only).
func MeasurePlan(ctx context.Context, layers []Layer, opts PlanOptions) (*PlanReport, error) {
	r := &PlanReport{}
	own := map[[32]byte][]byte{} // the file's own raw deflate, shared across layers
	for _, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t := time.Now()
		if err := planLayer(l, r, own, opts); err != nil {
			return nil, fmt.Errorf("parsebench: plan %s: %w", l.Name, err)
		}
		if planned := r.SearchSecs + r.CopySecs + r.EncodeSecs; planned > 0 {
			r.Speedup = (r.FullSecs + r.EncodeSecs) / planned
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

func planLayer(l Layer, r *PlanReport, own map[[32]byte][]byte, opts PlanOptions) error {
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
	ownToks := make([][]tok, len(files))
	i := 0 // first original token not before the file
	for fi, f := range files {
		if f.size < opts.MinCopy {
			continue
		}
		enc, ok := own[f.sum]
		if !ok {
			var b bytes.Buffer
			w, err := deflate.NewWriter(&b, 6)
			if err != nil {
				return err
			}
			w.KeepTokens()
			w.Write(out[f.off : f.off+f.size])
			if err := w.Close(); err != nil {
				return err
			}
			enc = b.Bytes()
			own[f.sum] = enc
			r.OwnBytes += int64(len(enc))
		}
		ot, _, err := tokensOf(enc, make([]byte, 0, f.size))
		if err != nil {
			return err
		}
		ownToks[fi] = ot
		for i < len(orig) && orig[i].off < f.off {
			i++
		}
		plan = append(plan, copies(orig[i:], ot, f, fi, opts.MinCopy)...)
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
	// Where the searched bytes are: in small files, in files large
	// enough to copy, or outside files (tar headers, padding).
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
		if f.size < opts.MinCopy {
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
	r.SearchOutside += int64(len(out)) - inFiles

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
		f := files[s.file]
		for _, o := range ownToks[s.file] {
			if p := f.off + o.off; p >= s.off && p < s.off+s.n {
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
	return err
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
	for {
		_, out, err := d.Next(buf)
		buf = out
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
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

// copies returns the stretches of file f (at index fi) whose tokens in
// the layer (orig, from the first token at or after the file's start) are
// those of its own parse ot: runs where both parses agree, each cut after
// its last token whose end has a known window index, kept when at least
// minCopy long.
func copies(orig, ot []tok, f file, fi int, minCopy int64) []stretch {
	var out []stretch
	start, cut := int64(-1), int64(-1)
	closeRun := func() {
		if start >= 0 && cut-start >= minCopy {
			out = append(out, stretch{off: start, n: cut - start, file: fi})
		}
		start, cut = -1, -1
	}
	i, j := 0, 0
	end := f.off + f.size
	for i < len(orig) && j < len(ot) && orig[i].off < end {
		po, pw := orig[i].off, f.off+ot[j].off
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
		o, w := orig[i], ot[j]
		if o.dist < 0 {
			// A stored block keeps bytes, not tokens: a copy runs
			// through it when the file's parse has a token boundary at
			// its end too (the rebuild writes it from the bytes).
			end := po + int64(o.length)
			k := j
			for k < len(ot) && f.off+ot[k].off < end {
				k++
			}
			if end > f.off+f.size || k < len(ot) && f.off+ot[k].off != end || k == len(ot) && end != f.off+f.size {
				closeRun()
				i++
				continue
			}
			if start < 0 {
				start = po
			}
			if deflate.WindowAt(end) >= 0 {
				cut = end
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
