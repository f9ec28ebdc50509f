package deflate

import (
	"bufio"
	"bytes"
	stdflate "compress/flate"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	kflate "github.com/klauspost/compress/flate"
	"github.com/klauspost/pgzip"
)

// goSource is up to limit bytes of the toolchain's own source: realistic
// text, always present.
func goSource(tb testing.TB, limit int) []byte {
	tb.Helper()
	var b []byte
	root := filepath.Join(runtime.GOROOT(), "src")
	filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil || len(b) >= limit {
			return filepath.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(p, ".go") {
			if f, err := os.ReadFile(p); err == nil {
				b = append(b, f...)
			}
		}
		return nil
	})
	if len(b) == 0 {
		tb.Skip("no Go source under GOROOT")
	}
	return b[:min(len(b), limit)]
}

// corpora are inputs of every shape the round trip must survive.
func corpora(tb testing.TB) map[string][]byte {
	rng := rand.New(rand.NewPCG(3, 4))
	random := make([]byte, 300<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	skewed := make([]byte, 200<<10)
	for i := range skewed {
		skewed[i] = "aaaabbbcdefgh\n"[rng.IntN(14)]
	}
	return map[string][]byte{
		"empty":  nil,
		"one":    {'x'},
		"zeros":  make([]byte, 300<<10),
		"random": random,
		"skewed": skewed,
		"64KiB":  layerLike(64<<10, 5),
		"layer":  layerLike(raceScale(4<<20), 6),
		"source": goSource(tb, raceScale(2<<20)),
	}
}

var allLevels = []int{HuffmanOnly, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, DefaultCompression}

// reencode decodes stream block by block and writes every block again;
// it returns the rebuilt stream, the inflated bytes and how many blocks of
// each type the stream had.
func reencode(tb testing.TB, stream []byte) (out, inflated []byte, types [3]int) {
	tb.Helper()
	var buf bytes.Buffer
	bw := NewBlockWriter(&buf, 0)
	var d Decoder
	inflated = eachBlock(tb, &d, stream, nil, func(b *Block) {
		types[b.Type]++
		if err := bw.Write(b); err != nil {
			tb.Fatal(err)
		}
	})
	if err := bw.Flush(); err != nil {
		tb.Fatal(err)
	}
	if got := (d.Bits() + 7) / 8; got != int64(len(stream)) {
		tb.Fatalf("stream of %d bytes decoded through byte %d", len(stream), got)
	}
	return buf.Bytes(), inflated, types
}

// eachBlock decodes stream with d, calling f (if any) with each block,
// and returns the bytes it inflated, appended to dst.
func eachBlock(tb testing.TB, d *Decoder, stream, dst []byte, f func(*Block)) []byte {
	tb.Helper()
	d.Reset(stream)
	for {
		b, out, err := d.Next(dst)
		dst = out
		if err == io.EOF {
			return dst
		}
		if err != nil {
			tb.Fatal(err)
		}
		if f != nil {
			f(b)
		}
	}
}

// TestReencodeOwnStreams: every block of every level's stream, decoded
// and written again, gives back the stream bit for bit, and the decoder
// inflates the input.
func TestReencodeOwnStreams(t *testing.T) {
	for name, in := range corpora(t) {
		for _, level := range allLevels {
			stream := compressWhole(t, level, in, 1<<30, nil)
			out, inflated, types := reencode(t, stream)
			if !bytes.Equal(inflated, in) {
				t.Fatalf("%s level %d: inflated %d bytes differ from the input's %d", name, level, len(inflated), len(in))
			}
			if !bytes.Equal(out, stream) {
				t.Fatalf("%s level %d: re-encoded stream (%d bytes) differs from the original (%d), first at byte %d",
					name, level, len(out), len(stream), firstDiff(out, stream))
			}
			t.Logf("%s level %d: %d bytes, %d stored, %d fixed, %d dynamic blocks", name, level, len(stream), types[0], types[1], types[2])
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestReencodeToolchain: streams of the toolchain's compress/flate (the
// same algorithm) re-encode exactly at every level.
func TestReencodeToolchain(t *testing.T) {
	in := layerLike(2<<20, 8)
	for _, level := range allLevels {
		var b bytes.Buffer
		w, _ := stdflate.NewWriter(&b, level)
		w.Write(in)
		w.Close()
		out, inflated, _ := reencode(t, b.Bytes())
		if !bytes.Equal(inflated, in) || !bytes.Equal(out, b.Bytes()) {
			t.Fatalf("compress/flate level %d: stream does not re-encode exactly", level)
		}
	}
}

// TestSameCodesKlauspost: klauspost/compress builds its codes its own
// way. Each of its blocks is written again on its own: whenever SameCodes
// says the header is Go's, the block's bits come back; whenever they do
// not, SameCodes said so.
func TestSameCodesKlauspost(t *testing.T) {
	srcs := map[string][]byte{"layer": layerLike(2<<20, 9), "source": goSource(t, 2<<20)}
	for name, in := range srcs {
		for _, level := range []int{1, 6, 9} {
			var b bytes.Buffer
			w, _ := kflate.NewWriter(&b, level)
			w.Write(in)
			w.Close()
			stream := b.Bytes()
			same, exact, dynamic := 0, 0, 0
			var inflated []byte
			d := NewDecoder(stream)
			bw := NewBlockWriter(nil, 0)
			var one bytes.Buffer
			for {
				blk, dst, err := d.Next(inflated)
				inflated = dst
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				sc := bw.SameCodes(blk)
				ok := blockReencodes(t, bw, &one, stream, blk)
				if sc && !ok {
					t.Fatalf("%s klauspost %d: block at bit %d (%v): SameCodes says yes, bits differ", name, level, blk.Bit, blk.Type)
				}
				if blk.Type == BlockDynamic {
					dynamic++
					if sc {
						same++
					}
					if ok {
						exact++
					}
				}
			}
			if !bytes.Equal(inflated, in) {
				t.Fatalf("%s klauspost %d: inflated bytes differ", name, level)
			}
			out, _, _ := reencode(t, stream)
			t.Logf("%s klauspost level %d: whole stream re-encodes exactly: %v; dynamic blocks %d, Go's codes %d, bit-exact %d",
				name, level, bytes.Equal(out, stream), dynamic, same, exact)
		}
	}
}

// blockReencodes writes blk alone, from its bit offset, and compares it
// with its bits in stream.
func blockReencodes(t *testing.T, bw *BlockWriter, buf *bytes.Buffer, stream []byte, blk *Block) bool {
	t.Helper()
	buf.Reset()
	bw.Reset(buf, int(blk.Bit&7))
	if err := bw.Write(blk); err != nil {
		t.Fatal(err)
	}
	if bw.Bits()-blk.Bit&7 != blk.EndBit-blk.Bit {
		return false
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), stream[blk.Bit/8:(blk.EndBit+7)/8]...)
	MaskSegment(want, blk.Bit, blk.EndBit)
	return bytes.Equal(buf.Bytes(), want)
}

// TestBlockWriterMidByte: a segment of blocks written from a boundary in
// the middle of a byte joins the previous segment into the stream.
func TestBlockWriterMidByte(t *testing.T) {
	in := layerLike(1<<20, 10)
	stream := compressWhole(t, 6, in, 1<<30, nil)
	d := NewDecoder(stream)
	var blocks []Block
	var dst []byte
	for {
		b, out, err := d.Next(dst)
		dst = out
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		c := *b
		c.Tokens = append([]Token(nil), b.Tokens...)
		blocks = append(blocks, c)
	}
	for cut := 1; cut < len(blocks); cut++ {
		if blocks[cut].Bit&7 == 0 {
			continue
		}
		var joined bytes.Buffer
		j := Joiner{W: &joined}
		for _, part := range [][]Block{blocks[:cut], blocks[cut:]} {
			var seg bytes.Buffer
			from := part[0].Bit
			bw := NewBlockWriter(&seg, int(from&7))
			for i := range part {
				if err := bw.Write(&part[i]); err != nil {
					t.Fatal(err)
				}
			}
			if err := bw.Flush(); err != nil {
				t.Fatal(err)
			}
			to := part[len(part)-1].EndBit
			if part[len(part)-1].Final {
				to = -1
			}
			if err := j.Add(seg.Bytes(), from, to); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(joined.Bytes(), stream) {
			t.Fatalf("cut before block %d at bit %d: joined segments differ", cut, blocks[cut].Bit)
		}
		return
	}
	t.Fatal("no block starts mid-byte")
}

// TestDecoderSteadyStateAllocs: decoding a stream again with a reused
// Decoder and dst allocates nothing.
func TestDecoderSteadyStateAllocs(t *testing.T) {
	in := layerLike(2<<20, 11)
	stream := compressWhole(t, 6, in, 1<<30, nil)
	d := NewDecoder(stream)
	dst := make([]byte, 0, len(in)+outSlack)
	var bw BlockWriter
	bw.w = newHuffmanBitWriter(io.Discard)
	allocs := testing.AllocsPerRun(3, func() {
		d.Reset(stream)
		out := dst[:0]
		for {
			_, o, err := d.Next(out)
			out = o
			if err != nil {
				break
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("decoding allocates %v times", allocs)
	}
	allocs = testing.AllocsPerRun(3, func() {
		d.Reset(stream)
		bw.Reset(io.Discard, 0)
		out := dst[:0]
		for {
			b, o, err := d.Next(out)
			out = o
			if err != nil {
				break
			}
			bw.Write(b)
		}
	})
	t.Logf("decode + re-encode: %v allocations per stream of %d bytes", allocs, len(in))
}

// TestDecoderErrors: truncations and damage are ErrCorrupt, never a
// panic; truncation is also io.ErrUnexpectedEOF.
func TestDecoderErrors(t *testing.T) {
	stream := compressWhole(t, 6, layerLike(200<<10, 12), 1<<30, nil)
	for _, n := range []int{0, 1, 2, 5, len(stream) / 3, len(stream) - 1} {
		err := decodeAll(stream[:n])
		if !errors.Is(err, ErrCorrupt) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("stream cut at %d: %v", n, err)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range raceScale(2000) {
		bad := append([]byte(nil), stream...)
		bad[rng.IntN(len(bad))] ^= byte(1 << rng.IntN(8))
		if err := decodeAll(bad); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("damaged stream: %v", err)
		}
	}
	if err := decodeAll([]byte{0x07}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reserved block type: %v", err)
	}
}

func decodeAll(stream []byte) error {
	d := NewDecoder(stream)
	var dst []byte
	for {
		_, out, err := d.Next(dst)
		dst = out
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// TestWalkBuffered: Walk over a bufio.Reader (as recompress reads a blob)
// finds what it finds over a byte reader, and leaves the reader at most a
// few bytes past the stream.
func TestWalkBuffered(t *testing.T) {
	var pg bytes.Buffer
	w, _ := pgzip.NewWriterLevel(&pg, 5)
	w.SetConcurrency(256<<10, 4) // a sync flush (stored block) every 256 KiB
	w.Write(layerLike(2<<20, 3))
	w.Close()
	for _, level := range []int{0, 1, 6, 100} {
		var stream []byte
		if level == 100 {
			stream = pg.Bytes()[10:] // past the gzip header
		} else {
			stream = compressWhole(t, level, layerLike(1<<20, 16), 1<<30, nil)
		}
		var want, got []Boundary
		size, bits, err := Walk(bytes.NewReader(stream), func(b Boundary) { want = append(want, b) })
		if err != nil {
			t.Fatal(err)
		}
		tail := []byte("trailer!")
		if level == 100 {
			tail = nil // the stream is followed by its gzip trailer
		}
		br := bufio.NewReaderSize(bytes.NewReader(append(append([]byte(nil), stream...), tail...)), 4096)
		size2, bits2, err := Walk(br, func(b Boundary) { got = append(got, b) })
		if err != nil || size2 != size || bits2 != bits || len(got) != len(want) {
			t.Fatalf("level %d: buffered walk: %d bytes, %d bits, %d blocks, %v; want %d, %d, %d", level, size2, bits2, len(got), err, size, bits, len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("level %d: boundary %d: %+v, want %+v", level, i, got[i], want[i])
			}
		}
		rest, _ := io.ReadAll(br)
		if level == 100 {
			tail = pg.Bytes()[10+(bits+7)/8:]
		}
		if len(rest) > len(tail) || len(rest) < len(tail)-4 {
			t.Fatalf("level %d: %d bytes left after the stream, want about %d", level, len(rest), len(tail))
		}
	}
}

// TestStreamDecoder: a stream decoded from a reader in chunks of any size
// (stored blocks across chunks included) gives the bytes, blocks and
// tokens of the same stream decoded from memory.
func TestStreamDecoder(t *testing.T) {
	var pg bytes.Buffer
	w, _ := pgzip.NewWriterLevel(&pg, 5)
	w.SetConcurrency(256<<10, 4) // sync flushes: stored blocks
	w.Write(layerLike(1<<20, 3))
	w.Close()
	streams := map[string][]byte{"pgzip": pg.Bytes()[10:]}
	for name, in := range corpora(t) {
		for _, level := range []int{0, 6} {
			streams[name+"/"+string(rune('0'+level))] = compressWhole(t, level, in, 1<<30, nil)
		}
	}
	type blk struct {
		in, size int
		typ      BlockType
		tokens   []Token
	}
	decode := func(d *Decoder) ([]byte, []blk, error) {
		var out []byte
		var blks []blk
		for {
			b, o, err := d.Next(out)
			out = o
			if err == io.EOF {
				return out, blks, nil
			}
			if err != nil {
				return out, blks, err
			}
			blks = append(blks, blk{int(b.In), b.Size, b.Type, append([]Token(nil), b.Tokens...)})
		}
	}
	for name, stream := range streams {
		want, wantBlks, err := decode(NewDecoder(stream))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, chunk := range []int{1, 7, 4096, 64 << 10} {
			got, gotBlks, err := decode(NewStreamDecoder(bytes.NewReader(stream), make([]byte, chunk)))
			if err != nil {
				t.Fatalf("%s, chunks of %d: %v", name, chunk, err)
			}
			if !bytes.Equal(got, want) || len(gotBlks) != len(wantBlks) {
				t.Fatalf("%s, chunks of %d: %d bytes in %d blocks, want %d in %d", name, chunk, len(got), len(gotBlks), len(want), len(wantBlks))
			}
			for i := range gotBlks {
				g, w := gotBlks[i], wantBlks[i]
				if g.in != w.in || g.size != w.size || g.typ != w.typ || !slices.Equal(g.tokens, w.tokens) {
					t.Fatalf("%s, chunks of %d: block %d differs", name, chunk, i)
				}
			}
		}
		// A cut stream is an error, never a short success.
		if _, _, err := decode(NewStreamDecoder(bytes.NewReader(stream[:len(stream)/2]), make([]byte, 4096))); len(stream) > 16 && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s cut in half: %v, want ErrCorrupt", name, err)
		}
	}
}

// TestAppendTokensReset: the tokens a decoder appended to a caller's slice
// stay the caller's: a Reset and a decode keeping each block's tokens in a
// buffer of the decoder's own leave them as they were.
func TestAppendTokensReset(t *testing.T) {
	a := compressWhole(t, 6, goSource(t, 200<<10), 1<<30, nil)
	b := compressWhole(t, 6, layerLike(200<<10, 3), 1<<30, nil)
	d := NewDecoder(a)
	d.AppendTokens(make([]Token, 0, 1<<20))
	if _, err := d.DecodeAll(nil, nil); err != nil {
		t.Fatal(err)
	}
	got := d.Tokens()
	want := slices.Clone(got)
	d.Reset(b)
	if _, err := d.DecodeAll(nil, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatal("a decode after Reset wrote over the tokens appended to the caller's slice")
	}
}

// TestLiteralRuns: a code whose literals are short, taken up to three
// from one load, decodes to the same bytes and tokens as one symbol at a
// time.
func TestLiteralRuns(t *testing.T) {
	in := corpora(t)["skewed"]
	stream := compressWhole(t, 6, in, 1<<30, nil)
	d := NewDecoder(stream)
	d.AppendTokens(nil)
	out, err := d.DecodeAll(nil, nil)
	if err != nil || !bytes.Equal(out, in) {
		t.Fatalf("decoded %d bytes (%v), want the %d in", len(out), err, len(in))
	}
	// The same stream a byte at a time goes through the careful path,
	// one symbol at a time.
	one := NewStreamDecoder(iotest.OneByteReader(bytes.NewReader(stream)), make([]byte, 1))
	one.AppendTokens(nil)
	out1, err := one.DecodeAll(nil, nil)
	if err != nil || !bytes.Equal(out1, in) || !slices.Equal(one.Tokens(), d.Tokens()) {
		t.Fatalf("a byte at a time: %d bytes, %d tokens (%v); want %d and %d", len(out1), len(one.Tokens()), err, len(in), len(d.Tokens()))
	}
}

// TestTokenBits: a fixed or dynamic block's header, tokens and
// end-of-block code take exactly its bits.
func TestTokenBits(t *testing.T) {
	in := corpora(t)["source"]
	var types [3]int
	for _, level := range []int{1, 6, 9} {
		var buf bytes.Buffer
		fw, err := stdflate.NewWriter(&buf, level)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(in[:len(in)/2])
		fw.Flush()
		// A short block, which levels 2-9 code fixed.
		fw.Write(bytes.Repeat([]byte("fixed "), 20))
		fw.Flush()
		fw.Write(in[len(in)/2:])
		fw.Close()
		d := NewDecoder(buf.Bytes())
		var out []byte
		for {
			b, o, err := d.Next(out)
			out = o
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			types[b.Type]++
			if b.Type == BlockStored {
				continue
			}
			bits := b.HeaderBits + b.EndBits()
			for _, tk := range b.Tokens {
				bits += b.TokenBits(tk)
			}
			if want := b.EndBit - b.Bit; int64(bits) != want {
				t.Fatalf("level %d: %v block at bit %d: header, tokens and end take %d bits, the block %d", level, b.Type, b.Bit, bits, want)
			}
		}
	}
	if types[BlockDynamic] == 0 || types[BlockFixed] == 0 {
		t.Fatalf("blocks by type %v, want fixed and dynamic ones", types)
	}
}
