package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/zstd"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/dedup/recompress"
	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// Span formats (issue 27). Spans write the original's tokens where no
// copy has them. spanFormats measures what the same tokens take in each
// format, its streams in one zstd frame per layer as spans are stored:
// sequences (length and distance per match: recompress's first format,
// about 3.5 bytes a match); without the length (the search takes the whole
// agreement at the distance it chose); with the match named by its place
// in the hash chain the search walked (deflate.Chains) instead of its
// distance and length; and that with each span's size. (recompress's
// chained format places a span by the copies' edges instead: the
// recipes' span bytes, printed with the coverage, are what it takes.) A
// match a format cannot name is written whole behind an escape, and
// counted.

// level6Chain is how many candidates compress/flate's level 6 tries.
const level6Chain = 128

// spanFormat is one region's tokens in each format.
type spanFormat struct {
	Tar     int64 `json:"tarBytes"` // input the tokens stand for
	Runs    int64 `json:"runs"`     // stretches of consecutive tokens
	Matches int64 `json:"matches"`
	// Unnamed are matches the chain does not reach; Unimplied those whose
	// length is not the agreement at their distance.
	Unnamed   int64            `json:"unnamed"`
	Unimplied int64            `json:"unimplied"`
	Places    [4]int64         `json:"places"` // matches at place 0, 1, 2–7, 8 and up
	Bytes     map[string]int64 `json:"bytes"`  // by format, zstd per layer
	// Kept is, per value V of worthChained's rule, the tar bytes, matches
	// and runs of the runs it keeps.
	Kept map[int][3]int64 `json:"kept"`
}

// chainedValues are the values of V measured: a run is kept when its
// size and a resumed search's 4 KiB reach V bytes per (matches + 3).
var chainedValues = []int{0, 8, 16, 32, 64, 128}

// spanFormats measures a setting's level-6 layers: Spans, the tokens its
// recipes' spans hold; Uncovered, every token no copy covers (the spans
// and what a restore searches), stored blocks aside.
type spanFormats struct {
	Spans     spanFormat `json:"spans"`
	Uncovered spanFormat `json:"uncovered"`
}

// spanFormatNames are the formats measured, in print order.
var spanFormatNames = []string{"sequences", "no length", "chain place", "chain, sized"}

// formatWriter writes one region's tokens of one layer in every format's
// streams.
type formatWriter struct {
	f *spanFormat
	// runs: per run, the bytes since the run before and its match count.
	runs, lits, lens, dhi, dlo []byte
	sizes                      []byte // per run, the input it covers
	flagged                    []byte // dhi with the top bit set where the length is written (escLens)
	escLens                    []byte
	places                     []byte // 255: the match is in esc
	esc                        []byte // length−3, distance−1 (2 bytes)
	open                       bool
	nlits, matches             int
	gap                        int64 // before the run under way
	start                      int64 // where the run under way started
	end                        int64 // where the last token ended
}

// add writes token t at member offset at, whose chain place (for a match)
// is place, ok (named) and whose length is implied or not.
func (w *formatWriter) add(at int64, t deflate.Token, place int, named, implied bool) {
	if !w.open {
		w.open, w.nlits, w.matches, w.gap, w.start = true, 0, 0, at-w.end, at
		w.f.Runs++
	}
	w.f.Tar += int64(t.Size())
	w.end = at + int64(t.Size())
	if !t.IsMatch() {
		w.nlits++
		return
	}
	w.f.Matches++
	w.matches++
	w.lits = binary.AppendUvarint(w.lits, uint64(w.nlits))
	w.nlits = 0
	d := t.Dist() - 1
	w.lens = append(w.lens, byte(t.Length()-3))
	w.dhi, w.dlo = append(w.dhi, byte(d>>8)), append(w.dlo, byte(d))
	if implied {
		w.flagged = append(w.flagged, byte(d>>8))
	} else {
		w.f.Unimplied++
		w.flagged = append(w.flagged, byte(d>>8)|0x80)
		w.escLens = append(w.escLens, byte(t.Length()-3))
	}
	if !named {
		w.f.Unnamed++
	}
	if !named || !implied {
		w.places = append(w.places, 255)
		w.esc = append(w.esc, byte(t.Length()-3), byte(d>>8), byte(d))
		return
	}
	w.places = append(w.places, byte(place))
	switch {
	case place == 0:
		w.f.Places[0]++
	case place == 1:
		w.f.Places[1]++
	case place < 8:
		w.f.Places[2]++
	default:
		w.f.Places[3]++
	}
}

// close ends the run under way, if any.
func (w *formatWriter) close() {
	if !w.open {
		return
	}
	w.open = false
	w.lits = binary.AppendUvarint(w.lits, uint64(w.nlits))
	w.runs = binary.AppendUvarint(binary.AppendUvarint(w.runs, uint64(w.gap)), uint64(w.matches))
	w.sizes = binary.AppendUvarint(w.sizes, uint64(w.end-w.start))
	if w.f.Kept == nil {
		w.f.Kept = map[int][3]int64{}
	}
	for _, v := range chainedValues {
		if w.end-w.start+4096 >= int64(v*(w.matches+3)) {
			k := w.f.Kept[v]
			w.f.Kept[v] = [3]int64{k[0] + w.end - w.start, k[1] + int64(w.matches), k[2] + 1}
		}
	}
}

// seal adds what each format's frame of the layer's streams takes.
func (w *formatWriter) seal(enc *zstd.Encoder) {
	w.close()
	if w.f.Bytes == nil {
		w.f.Bytes = map[string]int64{}
	}
	for name, parts := range map[string][][]byte{
		"sequences":    {w.runs, w.lits, w.lens, w.dhi, w.dlo},
		"no length":    {w.runs, w.lits, w.flagged, w.dlo, w.escLens},
		"chain place":  {w.runs, w.lits, w.places, w.esc},
		"chain, sized": {w.runs, w.sizes, w.lits, w.places, w.esc},
	} {
		if len(w.runs) > 0 {
			w.f.Bytes[name] += int64(len(enc.EncodeAll(slices.Concat(parts...), nil)))
		}
	}
}

// measure adds layer l, deduplicated into r, to sf: it inflates each
// member of l's blob, then walks its tokens again with the chains of its
// input.
func (sf *spanFormats) measure(l *dataset.Layer, r *dedup.Recipe) error {
	blob, err := layerBlob(l)
	if err != nil {
		return err
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	defer enc.Close()
	spans, uncovered := formatWriter{f: &sf.Spans}, formatWriter{f: &sf.Uncovered}
	p := 0
	for _, m := range r.Compression.Members {
		n, err := recompress.HeaderLen(blob[p:])
		if err != nil {
			return fmt.Errorf("member at %d: %w", p, err)
		}
		var d deflate.Decoder
		d.Reset(blob[p+n:])
		in, err := d.DecodeAll(nil, nil)
		if err != nil {
			return fmt.Errorf("member at %d: %w", p, err)
		}
		if int64(len(in)) != m.Size {
			return fmt.Errorf("member at %d inflates to %d bytes, its recipe says %d", p, len(in), m.Size)
		}
		var covered []span // copies and spans, member offsets
		var isSpan []bool
		m.Stretches(func(in, size int64, sp bool) {
			covered, isSpan = append(covered, span{in, in + size}), append(isSpan, sp)
		})
		chains := deflate.NewChains(in)
		c := 0
		spans.end, uncovered.end = 0, 0
		err = eachBlock(&d, blob[p+n:], func(b *deflate.Block) {
			if b.Type == deflate.BlockStored {
				spans.close()
				uncovered.close()
				return
			}
			at := b.In
			for _, t := range b.Tokens {
				for c < len(covered) && covered[c].to <= at {
					c++
				}
				inCopy := c < len(covered) && covered[c].from <= at && !isSpan[c]
				inSpan := c < len(covered) && covered[c].from <= at && isSpan[c]
				if inCopy {
					spans.close()
					uncovered.close()
				} else {
					var place int
					named, implied := false, false
					if t.IsMatch() {
						place, named = chains.Place(int(at), t.Dist(), level6Chain)
						implied = deflate.ImpliedLength(in, int(at), t.Dist()) == t.Length()
					}
					uncovered.add(at, t, place, named, implied)
					if inSpan {
						spans.add(at, t, place, named, implied)
					} else {
						spans.close()
					}
				}
				at += int64(t.Size())
			}
		})
		if err != nil {
			return fmt.Errorf("member at %d: %w", p, err)
		}
		p += n + int((d.Bits()+7)/8) + 8 // the member's trailer
	}
	spans.seal(enc)
	uncovered.seal(enc)
	return nil
}

// layerBlob reads layer l's blob whole.
func layerBlob(l *dataset.Layer) ([]byte, error) {
	f, err := l.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// writeSpanFormats prints s's span formats.
func writeSpanFormats(w io.Writer, s *followSetting) {
	sf := s.SpanFormats
	if sf.Uncovered.Bytes == nil {
		return
	}
	fmt.Fprintf(w, "\nlevel-6 tokens no copy covers, written as spans in other formats (parses %v; zstd per layer; %.1f MB stored):\n", s.Parses, float64(s.Stored)/1e6)
	fmt.Fprintf(w, "  %-10s %9s %8s %9s %8s %8s %24s", "region", "tar MB", "runs", "matches", "unnamed", "unimpl.", "place 0 / 1 / 2-7 / 8+")
	for _, name := range spanFormatNames {
		fmt.Fprintf(w, " %14s", name+" MB")
	}
	fmt.Fprintln(w)
	for _, r := range []struct {
		name string
		f    *spanFormat
	}{{"spans", &sf.Spans}, {"uncovered", &sf.Uncovered}} {
		f := r.f
		pct := func(n int64) float64 { return 100 * float64(n) / float64(max(f.Matches, 1)) }
		fmt.Fprintf(w, "  %-10s %9.1f %8d %9d %7.2f%% %7.2f%% %5.1f/%5.1f/%5.1f/%5.1f%%", r.name, float64(f.Tar)/1e6, f.Runs, f.Matches,
			pct(f.Unnamed), pct(f.Unimplied), pct(f.Places[0]), pct(f.Places[1]), pct(f.Places[2]), pct(f.Places[3]))
		for _, name := range spanFormatNames {
			fmt.Fprintf(w, " %14.2f", float64(f.Bytes[name])/1e6)
		}
		fmt.Fprintln(w)
		for _, v := range chainedValues {
			k := f.Kept[v]
			est := float64(f.Bytes["chain, sized"]) * float64(k[1]+3*k[2]) / float64(max(f.Matches+3*f.Runs, 1))
			fmt.Fprintf(w, "    runs kept at V=%d: %.1f MB of tar (%.1f%%), %d matches, %d runs, chain, sized ~%.2f MB\n", v, float64(k[0])/1e6, 100*float64(k[0])/float64(max(f.Tar, 1)), k[1], k[2], est/1e6)
		}
	}
	fmt.Fprintf(w, "  (spans: the tokens the recipes' spans hold; uncovered: those and every token a restore searches; sequences: length and distance per match;\n   no length: a match's length left to the agreement at its distance; chain place: a match named by its place in the hash chain its search walked,\n   length implied; sized: and each span's size; unnamed or not implied: written whole behind an escape)\n")
}
