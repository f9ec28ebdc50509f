package parsebench

import (
	"archive/tar"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// text is compressible pseudo-text of n bytes, different for each seed.
func text(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	words := strings.Fields("the quick brown fox jumps over a lazy dog while seven wizards quietly pack boxes of liquor jugs")
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		if rng.IntN(9) == 0 {
			fmt.Fprintf(&b, " %d\n", rng.IntN(100000))
		} else {
			b.WriteByte(' ')
		}
	}
	return b.Bytes()[:n]
}

type tfile struct {
	name string
	data []byte
}

func tarOf(t *testing.T, files ...tfile) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "dir/", Typeflag: tar.TypeDir, Mode: 0o755})
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Size: int64(len(f.data)), Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t *testing.T, level int, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func layerOf(name, group string, enc Encoder, blob []byte) Layer {
	return Layer{Name: name, Group: group, Encoder: enc, Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blob)), nil
	}}
}

func std6(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, 6) }

func TestTarFiles(t *testing.T) {
	files := []tfile{{"a", []byte("alpha")}, {"empty", nil}, {"b", text(1, 3000)}}
	b := tarOf(t, files...)
	got, err := tarFiles(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d files, want 2 (empty and directory left out)", len(got))
	}
	for i, f := range []tfile{files[0], files[2]} {
		if !bytes.Equal(b[got[i].off:got[i].off+got[i].size], f.data) || got[i].sum != sha256.Sum256(f.data) {
			t.Errorf("file %s: wrong offset or digest", f.name)
		}
	}
}

// TestMeasure builds two layers sharing a large file between different
// neighbours: past its first 32 KiB the shared file's parse must agree
// between the layers and with its own parse, as the encoder's decisions
// there depend on the file alone.
func TestMeasure(t *testing.T) {
	big, small := text(1, 300<<10), text(2, 2000)
	a := tarOf(t, tfile{"x", text(3, 50<<10)}, tfile{"big", big}, tfile{"small", small}, tfile{"y", text(4, 5000)})
	b := tarOf(t, tfile{"z", text(5, 70<<10)}, tfile{"big", big}, tfile{"w", text(6, 100)}, tfile{"small", small})
	layers := []Layer{
		layerOf("a", "go6", std6, gz(t, 6, a)),
		layerOf("b", "go6", std6, gz(t, 6, b)),
		layerOf("a-gnu", "other", nil, gz(t, 6, a)),
	}
	r, err := Measure(context.Background(), layers, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Groups) != 2 {
		t.Fatalf("%d groups", len(r.Groups))
	}
	g := r.Groups[0]
	if g.Layers != 2 || g.TarBytes != int64(len(a)+len(b)) || g.Files != 8 {
		t.Fatalf("group %+v", g)
	}
	// big and small are compared once each (b against a).
	sh := g.Shared.Total()
	if sh.Files != 2 || sh.Bytes != int64(len(big)+len(small)) {
		t.Fatalf("shared: %+v", sh)
	}
	if in := g.Shared.Interior; in.Bytes != int64(len(big)-interiorHead-interiorTail) || in.Agree != in.Bytes {
		t.Fatalf("shared interior: %+v", in)
	}
	s := g.Stored
	// big twice, x and z once: files past 32 KiB.
	if in := s.Interior; in.Files != 4 || in.Agree != in.Bytes {
		t.Fatalf("own parse interior: %+v", in)
	}
	// Every byte of a layer is either given by a stored parse or produced
	// by an exception token.
	if s.CoveredBytes+s.Exceptions.Bytes != g.TarBytes {
		t.Fatalf("covered %d + exceptions %d != %d", s.CoveredBytes, s.Exceptions.Bytes, g.TarBytes)
	}
	if s.InHeaders.Runs == 0 || s.InHeaders.Size > s.Exceptions.Size || s.Exceptions.Runs == 0 {
		t.Fatalf("exceptions %+v, outside files %+v", s.Exceptions, s.InHeaders)
	}
	if s.UniqueFiles != 6 || s.UniqueBytes != int64(len(big)+len(small)+50<<10+5000+70<<10+100) || s.DeflateBytes == 0 || s.ZstdBytes == 0 {
		t.Fatalf("unique files %+v", s)
	}
	if g.Blocks.Blocks < 2 || g.Blocks.Dynamic == 0 || g.Blocks.HeaderBits == 0 || g.Blocks.InShared > g.Blocks.InFiles {
		t.Fatalf("blocks %+v", g.Blocks)
	}
	if o := r.Groups[1]; o.Stored != nil || o.Shared.Total().Files != 0 {
		t.Fatalf("group without encoder or shared files: %+v", o)
	}

	var text, js bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "go6") || !strings.Contains(js.String(), `"covered_bytes"`) {
		t.Fatalf("report:\n%s\n%s", text.String(), js.String())
	}
}

// TestMeasureIdentical: the same layer twice in a group agrees everywhere
// but on tokens that start before a file (never agreeing) and matches
// reaching back before it (agreeing only in AgreeBack).
func TestMeasureIdentical(t *testing.T) {
	tb := tarOf(t, tfile{"a", text(1, 100<<10)}, tfile{"b", text(2, 300)}, tfile{"c", text(2, 300)})
	blob := gz(t, 6, tb)
	r, err := Measure(context.Background(), []Layer{layerOf("1", "g", nil, blob), layerOf("2", "g", nil, blob)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var p parse
	if _, err := Gunzip(blob, Visitor{Token: p.token}); err != nil {
		t.Fatal(err)
	}
	files, err := tarFiles(tb)
	if err != nil {
		t.Fatal(err)
	}
	var foreignBytes, backBytes int64
	c := cursor{p: p}
	for _, f := range files[:2] { // c is b's second copy: not compared
		for _, e := range c.extract(f.off, f.off+f.size) {
			switch e.kind() {
			case kindForeign:
				foreignBytes += e.size()
			case kindBack:
				backBytes += e.size()
			}
		}
	}
	sh := r.Groups[0].Shared.Total()
	if sh.Files != 2 || backBytes == 0 || sh.Agree+backBytes+foreignBytes != sh.Bytes || sh.AgreeBack+foreignBytes != sh.Bytes {
		t.Fatalf("shared %+v; %d bytes in matches reaching back, %d in tokens from before", sh, backBytes, foreignBytes)
	}
}

func TestMeasureNotGzip(t *testing.T) {
	_, err := Measure(context.Background(), []Layer{layerOf("plain", "g", nil, []byte("not gzip at all"))}, Options{})
	if err == nil {
		t.Fatal("plain bytes measured")
	}
}
