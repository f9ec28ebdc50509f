package parsebench

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	kflate "github.com/klauspost/compress/flate"
)

// inputs are random and real data of several kinds: incompressible,
// few-symbol, repetitive with long and overlapping matches, and Go source.
func inputs(t *testing.T) map[string][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 200<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	skewed := make([]byte, 300<<10)
	for i := range skewed {
		skewed[i] = "aaaabbbcdefgh\n"[rng.IntN(14)]
	}
	var repet []byte
	for len(repet) < 500<<10 {
		n := rng.IntN(300) + 1
		if len(repet) > 40000 && rng.IntN(2) == 0 {
			from := len(repet) - 1 - rng.IntN(40000)
			for i := range n {
				repet = append(repet, repet[from+i])
			}
			continue
		}
		for range n {
			repet = append(repet, byte(rng.IntN(256)))
		}
	}
	var src []byte
	root := filepath.Join(runtime.GOROOT(), "src", "compress", "flate")
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(root, e.Name())); err == nil {
			src = append(src, b...)
		}
	}
	return map[string][]byte{
		"empty": nil, "one": {'x'}, "zeros": make([]byte, 100<<10),
		"random": random, "skewed": skewed, "repetitive": repet, "gosource": src,
	}
}

// encoders cover every block type: stored (level 0 and incompressible
// input), fixed (short inputs), dynamic, Huffman-only, and klauspost's
// encoders, which emit different parses and block splits.
var encoders = map[string]func(io.Writer) (io.WriteCloser, error){
	"std0":   func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, 0) },
	"std1":   func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, 1) },
	"std6":   func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, 6) },
	"std9":   func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, 9) },
	"huff":   func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, flate.HuffmanOnly) },
	"klaus1": func(w io.Writer) (io.WriteCloser, error) { return kflate.NewWriter(w, 1) },
	"klaus5": func(w io.Writer) (io.WriteCloser, error) { return kflate.NewWriter(w, 5) },
	"klaus9": func(w io.Writer) (io.WriteCloser, error) { return kflate.NewWriter(w, 9) },
}

func compress(t *testing.T, enc func(io.Writer) (io.WriteCloser, error), data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := enc(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestInflateMatchesFlate checks that the bytes Inflate reconstructs equal
// compress/flate's, that tokens tile the output in order, and that the
// stream length it reports is the stream's.
func TestInflateMatchesFlate(t *testing.T) {
	for name, data := range inputs(t) {
		for ename, enc := range encoders {
			t.Run(name+"/"+ename, func(t *testing.T) {
				z := compress(t, enc, data)
				want, err := io.ReadAll(flate.NewReader(bytes.NewReader(z)))
				if err != nil {
					t.Fatal(err)
				}
				var next int64
				var blocks int
				v := Visitor{
					Block: func(b Block) {
						blocks++
						if b.Off != next {
							t.Fatalf("block at %d, tokens reached %d", b.Off, next)
						}
						if b.Type == BlockDynamic && (len(b.LitLens) < 257 || len(b.DistLens) < 1) {
							t.Fatalf("dynamic block with %d+%d code lengths", len(b.LitLens), len(b.DistLens))
						}
					},
					Token: func(tk Token) {
						if tk.Off != next {
							t.Fatalf("token at %d, want %d", tk.Off, next)
						}
						if tk.Kind == Match && (tk.Len < 3 || tk.Len > 258 || tk.Dist < 1 || tk.Dist > 1<<15) {
							t.Fatalf("bad match %+v", tk)
						}
						next += int64(tk.Len)
					},
				}
				// Trailing bytes after the stream must be left alone.
				got, n, err := Inflate(nil, append(bytes.Clone(z), 0xde, 0xad), v)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("output differs from compress/flate (%d vs %d bytes)", len(got), len(want))
				}
				if next != int64(len(want)) || blocks == 0 {
					t.Fatalf("tokens cover %d of %d bytes, %d blocks", next, len(want), blocks)
				}
				if n != len(z) {
					t.Fatalf("stream spans %d bytes, want %d", n, len(z))
				}
			})
		}
	}
}

// TestInflateReencode checks tokens and block types against what the
// encoder wrote: Go's level 0 writes only stored blocks, HuffmanOnly only
// literals.
func TestInflateReencode(t *testing.T) {
	data := inputs(t)["gosource"]
	var kinds [3]int
	var types [3]int
	v := Visitor{Block: func(b Block) { types[b.Type]++ }, Token: func(tk Token) { kinds[tk.Kind]++ }}
	if _, _, err := Inflate(nil, compress(t, encoders["std0"], data), v); err != nil {
		t.Fatal(err)
	}
	if kinds[Literal]+kinds[Match] != 0 || types[BlockStored] == 0 {
		t.Fatalf("level 0: tokens %v blocks %v", kinds, types)
	}
	kinds, types = [3]int{}, [3]int{}
	if _, _, err := Inflate(nil, compress(t, encoders["huff"], data), v); err != nil {
		t.Fatal(err)
	}
	if kinds[Match] != 0 || kinds[Literal] != len(data) || types[BlockDynamic] == 0 {
		t.Fatalf("Huffman only: tokens %v blocks %v", kinds, types)
	}
}

func TestInflateCorrupt(t *testing.T) {
	z := compress(t, encoders["std6"], inputs(t)["gosource"])
	for _, bad := range [][]byte{
		nil,
		{0x07},                         // reserved block type 3
		{0x01, 0x05, 0x00, 0x00, 0x00}, // stored, NLEN not LEN's complement
		z[:len(z)/2],                   // truncated
	} {
		if _, _, err := Inflate(nil, bad, Visitor{}); err == nil {
			t.Errorf("Inflate(% x...) succeeded", bad[:min(len(bad), 8)])
		}
	}
	// Flipped bits must fail or give different bytes, never panic.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		b := bytes.Clone(z)
		b[rng.IntN(len(b))] ^= 1 << rng.IntN(8)
		_, _, _ = Inflate(nil, b, Visitor{})
	}
}

func TestGunzip(t *testing.T) {
	var buf bytes.Buffer
	parts := [][]byte{[]byte("first member\n"), bytes.Repeat([]byte("second member "), 1000)}
	for i, p := range parts {
		zw := gzip.NewWriter(&buf)
		if i == 1 {
			zw.Name, zw.Comment, zw.Extra = "name", "comment", []byte{1, 2, 3}
		}
		zw.Write(p)
		zw.Close()
	}
	buf.Write(make([]byte, 16)) // trailing zeros, as some tools pad
	var last Token
	out, err := Gunzip(buf.Bytes(), Visitor{Token: func(tk Token) { last = tk }})
	if err != nil {
		t.Fatal(err)
	}
	if want := bytes.Join(parts, nil); !bytes.Equal(out, want) {
		t.Fatalf("got %q", out)
	}
	if last.Off+int64(last.Len) != int64(len(out)) {
		t.Fatalf("last token %+v does not end the output (%d bytes)", last, len(out))
	}
	b := bytes.Clone(buf.Bytes())
	b[len(b)-16-8] ^= 1 // the second member's CRC
	if _, err := Gunzip(b, Visitor{}); err == nil {
		t.Fatal("bad CRC accepted")
	}
}
