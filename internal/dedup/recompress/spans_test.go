package recompress

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// TestSpans: a check keeping spans writes the original's tokens wherever
// no copy has them, so that copies and spans together cover the input (Go
// sources leave no stored block), every match named by its place in its
// chain; a rebuild with them writes the blob with all the parses, some or
// none, on one core or several.
func TestSpans(t *testing.T) {
	input, blob, kept, parses := checkedGoSources(t, 3<<20, true)
	var copied, spanned, stretches int64
	end := int64(-1)
	for _, m := range kept.Members {
		m.Stretches(func(in, size int64, span bool) {
			if in < end {
				t.Fatalf("stretch at %d overlaps the one before, ending at %d", in, end)
			}
			end = in + size
			stretches++
			if span {
				spanned += size
			} else {
				copied += size
			}
		})
	}
	t.Logf("%d bytes: copies %d, spans %d, in %d stretches; spans take %d bytes", len(input), copied, spanned, stretches, len(kept.Members[0].Spans))
	if copied+spanned != int64(len(input)) || spanned == 0 || copied < spanned {
		t.Fatalf("copies cover %d and spans %d of %d bytes: want spans, mostly copies, all of it", copied, spanned, len(input))
	}
	for _, m := range kept.Members {
		spans, err := decodeSpans(m.Spans, m.Size, m.Copies)
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range spans {
			if !sp.chained || len(sp.esc) != 0 {
				t.Fatalf("span at %d: chained %v, %d escaped bytes; want chained, none escaped (Go's own stream)", sp.In, sp.chained, len(sp.esc))
			}
		}
	}
	if kept.SpannedBytes() != spanned {
		t.Fatalf("SpannedBytes says %d, the stretches %d", kept.SpannedBytes(), spanned)
	}
	rebuild := rebuildsBlob(t, input, blob)
	rebuild("all parses, one core", kept, parses(), 1)
	rebuild("all parses, four cores", kept, parses(), 4)
	some := parses()
	some.list = slices.DeleteFunc(some.list, func(p *Parse) bool { return p.Source%2 == 1 })
	rebuild("every other parse", kept, some, 2)
	rebuild("no parses", kept, &Parses{}, 2)

	// Spans that do not decode are searched: the rebuild still writes
	// the blob.
	damaged := kept
	damaged.Members = slices.Clone(kept.Members)
	for i := range damaged.Members {
		sp := slices.Clone(damaged.Members[i].Spans)
		sp[len(sp)-1] ^= 0xff // zstd's checksum
		damaged.Members[i].Spans = sp
	}
	rebuild("spans that do not decode", damaged, parses(), 2)

	// Recipes written before chained spans hold them in sequences: the
	// same tokens, as lengths and distances, rebuild the blob too.
	older := kept
	older.Members = slices.Clone(kept.Members)
	var base int64
	for i, m := range older.Members {
		in := input[base : base+m.Size]
		spans, err := decodeSpans(m.Spans, m.Size, m.Copies)
		if err != nil {
			t.Fatal(err)
		}
		var w spanWriter
		ch := deflate.NewChains(in)
		for _, sp := range spans {
			toks, ok := sp.tokens(nil, in, 0, ch)
			if !ok {
				t.Fatalf("member %d: span at %d does not decode", i, sp.In)
			}
			at := sp.In
			for _, tk := range toks {
				w.add(at, tk)
				at += int64(tk.Size())
			}
			w.end()
		}
		if older.Members[i].Spans, err = encodeSpans(w.spans, m.Copies); err != nil {
			t.Fatal(err)
		}
		if got, err := decodeSpans(older.Members[i].Spans, m.Size, m.Copies); err != nil || len(got) != len(spans) || got[0].chained {
			t.Fatalf("member %d: spans in sequences decode to %d spans, %v; want %d, not chained", i, len(got), err, len(spans))
		}
		t.Logf("member %d: spans in sequences take %d bytes, chained %d", i, len(older.Members[i].Spans), len(m.Spans))
		base += m.Size
	}
	rebuild("spans in sequences", older, parses(), 2)
}

// TestSpanEncoding: spans found from a stream's tokens around copies and
// a stored block decode to those tokens, and spans that could not be a
// member's are refused.
func TestSpanEncoding(t *testing.T) {
	in := []byte("abcabcabcabc-xyz-xyzxyzxyz!!!!!!!!!!")
	var orig []origToken
	add := func(tok deflate.Token, stored bool, n int) {
		off := int64(0)
		if k := len(orig); k > 0 {
			off = orig[k-1].off + int64(orig[k-1].n)
		}
		orig = append(orig, origToken{off: off, tok: tok, n: int32(n), stored: stored})
	}
	lit := func(i int) { add(deflate.LiteralToken(in[i]), false, 1) }
	lit(0)
	lit(1)
	lit(2)
	add(deflate.MatchToken(9, 3), false, 9) // abcabcabc
	lit(12)                                 // -
	lit(13)                                 // x, in a copy
	lit(14)                                 // y, in a copy
	lit(15)                                 // z
	lit(16)                                 // -
	add(0, true, 3)                         // xyz, a stored block
	add(deflate.MatchToken(6, 3), false, 6) // xyzxyz
	lit(26)
	add(deflate.MatchToken(8, 1), false, 8) // eight of nine !s: not the search's
	lit(35)
	copies := []Copy{{In: 13, Size: 2}}
	spans := findSpans(orig, copies)
	want := [][2]int64{{0, 13}, {15, 2}, {20, 16}}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, sp := range spans {
		if sp.In != want[i][0] || sp.Size != want[i][1] {
			t.Fatalf("span %d: %d bytes at %d, want %d at %d", i, sp.Size, sp.In, want[i][1], want[i][0])
		}
	}
	var wantToks []deflate.Token
	for _, o := range orig {
		if !o.stored && (o.off < 13 || o.off >= 15) {
			wantToks = append(wantToks, o.tok)
		}
	}
	// In sequences, as recipes before chained spans hold them, then
	// chained: the matches at 3 and 20 are in their chains, the one at 27
	// (8 of the 9 bytes that agree there) is escaped.
	for _, chained := range []bool{false, true} {
		spans := slices.Clone(spans)
		if chained {
			chain(spans, in, 0)
		}
		enc, err := encodeSpans(spans, copies)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeSpans(enc, int64(len(in)), copies)
		if err != nil {
			t.Fatal(err)
		}
		var toks []deflate.Token
		ch := deflate.NewChains(in)
		escaped := 0
		for _, sp := range got {
			if sp.chained != chained {
				t.Fatalf("span at %d decoded chained %v, want %v", sp.In, sp.chained, chained)
			}
			escaped += len(sp.esc) / 3
			var ok bool
			if toks, ok = sp.tokens(toks, in, 0, ch); !ok {
				t.Fatalf("chained %v: span at %d does not decode", chained, sp.In)
			}
		}
		if !slices.Equal(toks, wantToks) {
			t.Fatalf("chained %v: decoded tokens %v, want %v", chained, toks, wantToks)
		}
		if chained && escaped != 1 {
			t.Fatalf("%d matches escaped, want 1", escaped)
		}
		if _, err := decodeSpans(enc, int64(len(in))-1, copies); !errors.Is(err, errBadSpans) {
			t.Fatalf("chained %v: spans past the member's end: %v", chained, err)
		}
	}

	bad := func(name string, raw []byte) {
		t.Helper()
		if _, err := decodeSpansRaw(t, spansSequences, raw, 1000); !errors.Is(err, errBadSpans) {
			t.Fatalf("%s: %v, want errBadSpans", name, err)
		}
	}
	badChained := func(name string, raw []byte) {
		t.Helper()
		if _, err := decodeSpansRaw(t, spansChained, raw, 1000); !errors.Is(err, errBadSpans) {
			t.Fatalf("chained, %s: %v, want errBadSpans", name, err)
		}
	}
	// Chained, after the format byte: count; per span, its start and end
	// (0: the edge of a copy; else 1 + the offset from the span before's
	// end, from its start) and match count; literal counts; places;
	// escaped matches. No copies here.
	good, err := decodeSpansRaw(t, spansChained, []byte{1, 1, 6, 1, 2, 0, 0}, 1000)
	if err != nil || len(good) != 1 || good[0].In != 0 || good[0].Size != 5 {
		t.Fatalf("a good chained span: %+v, %v", good, err) // two literals, a match at place 0
	}
	// Its match, on eight x's, agrees past the span's end: not this span.
	buf := []byte("xxxxxxxx")
	if _, ok := good[0].tokens(nil, buf, 0, deflate.NewChains(buf)); ok {
		t.Fatal("a chained span whose match runs past its end decoded")
	}
	buf = []byte("abxxxxxx")
	if _, ok := good[0].tokens(nil, buf, 0, deflate.NewChains(buf)); ok {
		t.Fatal("a chained span whose place is in no chain decoded")
	}
	badChained("escape cut short", []byte{1, 1, 6, 1, 2, 0, 255, 0, 0})
	badChained("escaped match further than 32 KiB", []byte{1, 1, 6, 1, 2, 0, 255, 0, 128, 0})
	badChained("size below its literals and matches", []byte{1, 1, 5, 1, 2, 0, 0})
	badChained("stream left over", []byte{1, 1, 6, 1, 2, 0, 0, 7})
	badChained("empty span", []byte{1, 1, 1, 0, 0})
	badChained("past the member", []byte{1, 1, 0xea, 0x07, 0, 0})
	badChained("at a copy's edge with no copy", []byte{1, 0, 6, 1, 2, 0, 0})
	// In sequences: count; gap and matches per span; literal counts;
	// lengths, distances' high bytes, low bytes.
	if _, err := decodeSpansRaw(t, spansSequences, []byte{1, 0, 1, 2, 0, 255, 0, 0}, 1000); err != nil {
		t.Fatalf("a good span: %v", err) // two literals, a match of 258
	}
	bad("match further than 32 KiB", []byte{1, 0, 1, 0, 0, 0, 128, 0})
	bad("cut short", []byte{1, 0, 2, 0, 5, 5})
	bad("stream left over", []byte{1, 0, 1, 0, 0, 0, 0, 0, 0})
	bad("empty span", []byte{1, 0, 0, 0})
	bad("past the member", []byte{1, 0, 0, 0xe9, 0x07})
	bad("overflowing count", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zw.Close()
	if _, err := decodeSpans(zw.EncodeAll([]byte{3, 1, 0, 1, 2, 0, 255, 0, 0}, nil), 1000, nil); !errors.Is(err, errBadSpans) {
		t.Fatalf("another format: %v", err)
	}
	if _, err := decodeSpans([]byte("not zstd"), 1000, nil); !errors.Is(err, errBadSpans) {
		t.Fatalf("not zstd: %v", err)
	}
}

// decodeSpansRaw decodes raw in format, compressed as spans are stored.
func decodeSpansRaw(t *testing.T, format byte, raw []byte, size int64) ([]Span, error) {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return decodeSpans(enc.EncodeAll(append([]byte{format}, raw...), nil), size, nil)
}

// BenchmarkRebuildSpans times, on one core, a level-6 rebuild following
// its files' parses alone and with spans (no search at all).
func BenchmarkRebuildSpans(b *testing.B) {
	input, _, kept, parses := checkedGoSources(b, 8<<20, true)
	noSpans := kept
	noSpans.Members = slices.Clone(kept.Members)
	for i := range noSpans.Members {
		noSpans.Members[i].Spans = nil
	}
	for _, bc := range []struct {
		name string
		r    Recipe
	}{{"copies", noSpans}, {"copies+spans", kept}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(input)))
			for b.Loop() {
				if err := RebuildFollowing(io.Discard, bc.r, bytes.NewReader(input), 1, parses()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
