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

// TestSpans: a check keeping every span writes the original's tokens
// wherever no copy has them, so that copies and spans together cover the
// input (Go sources leave no stored block); a rebuild with them writes
// the blob with all the parses, some or none, on one core or several.
func TestSpans(t *testing.T) {
	testSpans(t, true)
}

// TestSpansWorthTheirBytes: a check keeping the spans worth their bytes
// keeps some (tar headers) and leaves the rest to search, and a rebuild
// searching between copies and spans writes the blob all the same.
func TestSpansWorthTheirBytes(t *testing.T) {
	testSpans(t, false)
}

func testSpans(t *testing.T, all bool) {
	input, blob, kept, parses := checkedGoSources(t, 3<<20, true, all)
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
	if all && copied+spanned != int64(len(input)) || spanned == 0 || copied < spanned {
		t.Fatalf("copies cover %d and spans %d of %d bytes: want spans, mostly copies, all with every span", copied, spanned, len(input))
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
	add(deflate.MatchToken(9, 1), false, 9)
	copies := []Copy{{In: 13, Size: 2}}
	spans := findSpans(orig, copies, true)
	want := [][2]int64{{0, 13}, {15, 2}, {20, 16}}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, sp := range spans {
		if sp.In != want[i][0] || sp.Size != want[i][1] {
			t.Fatalf("span %d: %d bytes at %d, want %d at %d", i, sp.Size, sp.In, want[i][1], want[i][0])
		}
	}
	enc, err := encodeSpans(spans)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeSpans(enc, int64(len(in)))
	if err != nil {
		t.Fatal(err)
	}
	var toks []deflate.Token
	for _, sp := range got {
		toks = sp.tokens(toks, in[sp.In:])
	}
	var wantToks []deflate.Token
	for _, o := range orig {
		if !o.stored && (o.off < 13 || o.off >= 15) {
			wantToks = append(wantToks, o.tok)
		}
	}
	if !slices.Equal(toks, wantToks) {
		t.Fatalf("decoded tokens %v, want %v", toks, wantToks)
	}
	if _, err := decodeSpans(enc, int64(len(in))-1); !errors.Is(err, errBadSpans) {
		t.Fatalf("spans past the member's end: %v", err)
	}

	bad := func(name string, raw []byte) {
		t.Helper()
		if _, err := decodeSpansRaw(t, raw, 1000); !errors.Is(err, errBadSpans) {
			t.Fatalf("%s: %v, want errBadSpans", name, err)
		}
	}
	// Spans in streams, after the format byte: count; gap and matches
	// per span; literal counts; lengths, distances' high bytes, low bytes.
	if _, err := decodeSpansRaw(t, []byte{1, 0, 1, 2, 0, 255, 0, 0}, 1000); err != nil {
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
	if _, err := decodeSpans(zw.EncodeAll([]byte{2, 1, 0, 1, 2, 0, 255, 0, 0}, nil), 1000); !errors.Is(err, errBadSpans) {
		t.Fatalf("another format: %v", err)
	}
	if _, err := decodeSpans([]byte("not zstd"), 1000); !errors.Is(err, errBadSpans) {
		t.Fatalf("not zstd: %v", err)
	}
}

// decodeSpansRaw decodes raw, compressed as spans are stored.
func decodeSpansRaw(t *testing.T, raw []byte, size int64) ([]Span, error) {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return decodeSpans(enc.EncodeAll(append([]byte{spansSequences}, raw...), nil), size)
}

// BenchmarkRebuildSpans times, on one core, a level-6 rebuild following
// its files' parses alone and with spans (no search at all).
func BenchmarkRebuildSpans(b *testing.B) {
	input, _, kept, parses := checkedGoSources(b, 8<<20, true, true)
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
