package deflate

import (
	"bytes"
	stdflate "compress/flate"
	"fmt"
	"math/rand/v2"
	"testing"
)

// layerLike is deterministic input shaped like a layer tar: text, runs of
// zeros (tar padding), incompressible stretches (compressed files inside
// the layer) and repeats of earlier content.
func layerLike(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"usr", "share", "doc", "lib", "x86_64-linux-gnu", "the", "of", "and", "copyright", "license",
		"debian", "package", "version", "GNU", "General", "Public", "License", "/", ".so", "\n", " ", "\t", "=", "0", "1"}
	var b bytes.Buffer
	for b.Len() < n {
		switch k := r.IntN(10); {
		case k < 5:
			for range 200 + r.IntN(4000) {
				b.WriteString(words[min(r.IntN(len(words)), r.IntN(len(words)))])
			}
		case k < 7:
			b.Write(make([]byte, 1+r.IntN(3000)))
		case k < 9:
			p := make([]byte, 1+r.IntN(40000))
			for i := range p {
				p[i] = byte(r.Uint32())
			}
			b.Write(p)
		default:
			if b.Len() > 1000 {
				from := r.IntN(b.Len() - 500)
				to := min(b.Len(), from+500+r.IntN(20000))
				b.Write(append([]byte(nil), b.Bytes()[from:to]...))
			}
		}
	}
	return b.Bytes()[:n]
}

func compressWhole(t testing.TB, level int, in []byte, chunk int, onBlock func(Boundary)) []byte {
	t.Helper()
	var out bytes.Buffer
	w, err := NewWriter(&out, level)
	if err != nil {
		t.Fatal(err)
	}
	if onBlock != nil {
		w.OnBlock(onBlock)
	}
	for p := in; len(p) > 0; {
		k := min(chunk, len(p))
		if _, err := w.Write(p[:k]); err != nil {
			t.Fatal(err)
		}
		p = p[k:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestMatchesToolchain: the copy writes what the toolchain's compress/flate
// writes, at every level and however the input is split into writes.
func TestMatchesToolchain(t *testing.T) {
	in := layerLike(raceScale(3<<20), 7)
	for level := -2; level <= 9; level++ {
		var want bytes.Buffer
		w, err := stdflate.NewWriter(&want, level)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(in)
		w.Close()
		for _, chunk := range []int{1 << 30, 32 << 10, 4093} {
			if got := compressWhole(t, level, in, chunk, nil); !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("level %d, writes of %d: output differs from compress/flate", level, chunk)
			}
		}
	}
}

// TestSegmentsRejoin compresses a stream in segments from its recorded
// block boundaries and checks the joined segments are the stream. For
// levels 4–9 every boundary must restart exactly (the package doc argues
// why); for levels 1–3 the test reports how many do.
func TestSegmentsRejoin(t *testing.T) {
	inputs := map[string][]byte{"layer-like": layerLike(raceScale(6<<20), 3), "zeros": make([]byte, raceScale(9<<20))}
	for name, in := range inputs {
		for _, level := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9} {
			t.Run(fmt.Sprintf("%s/%d", name, level), func(t *testing.T) {
				var bs []Boundary
				whole := compressWhole(t, level, in, 1<<30, func(b Boundary) { bs = append(bs, b) })
				if len(bs) == 0 {
					t.Fatal("no block boundaries reported")
				}
				good, bad := 0, 0
				for i, b := range bs {
					if b.In+Lookahead > int64(len(in)) {
						continue
					}
					var to *Boundary
					if i+1 < len(bs) && bs[i+1].In+Lookahead <= int64(len(in)) {
						to = &bs[i+1]
					}
					if segmentMatches(t, level, in, whole, b, to) {
						good++
					} else {
						bad++
					}
				}
				t.Logf("%d of %d boundaries restart exactly", good, good+bad)
				if level >= 4 && bad > 0 {
					t.Fatalf("%d boundaries do not restart", bad)
				}
			})
		}
	}
}

// segmentMatches compresses the segment from b to to and compares it
// with the bits of whole it must reproduce.
func segmentMatches(t *testing.T, level int, in, whole []byte, b Boundary, to *Boundary) bool {
	t.Helper()
	end := int64(len(in))
	if to != nil {
		end = min(end, to.In+Lookahead)
	}
	seg, err := CompressSegment(level, b, in[:b.In], in[b.In:end], to)
	if err != nil {
		return false
	}
	lo := b.Bit / 8
	hi := int64(len(whole))
	if to != nil {
		hi = (to.Bit + 7) / 8
	}
	want := append([]byte(nil), whole[lo:hi]...)
	toBit := int64(-1)
	if to != nil {
		toBit = to.Bit
	}
	MaskSegment(want, b.Bit, toBit)
	return bytes.Equal(seg, want)
}

// TestJoin rebuilds a whole stream from segments between every fourth
// boundary through Joiner.
func TestJoin(t *testing.T) {
	in := layerLike(4<<20, 11)
	for _, level := range []int{6, 9} {
		var bs []Boundary
		whole := compressWhole(t, level, in, 1<<30, func(b Boundary) { bs = append(bs, b) })
		points := []Boundary{{}}
		for i, b := range bs {
			if i%4 == 3 && b.In+Lookahead < int64(len(in)) {
				points = append(points, b)
			}
		}
		var out bytes.Buffer
		j := &Joiner{W: &out}
		for i, p := range points {
			var to *Boundary
			end := int64(len(in))
			toBit := int64(-1)
			if i+1 < len(points) {
				to = &points[i+1]
				end = to.In + Lookahead
				toBit = to.Bit
			}
			seg, err := CompressSegment(level, p, in[:p.In], in[p.In:end], to)
			if err != nil {
				t.Fatalf("level %d, segment %d: %v", level, i, err)
			}
			if err := j.Add(seg, p.Bit, toBit); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(out.Bytes(), whole) {
			t.Fatalf("level %d: %d segments joined differ from the stream", level, len(points))
		}
	}
}

// TestWalkFindsEncoderBoundaries: walking a stream finds the block
// boundaries its encoder reported, with the same window index wherever
// the walk claims to know it, and the stream's inflated size and length.
func TestWalkFindsEncoderBoundaries(t *testing.T) {
	in := layerLike(5<<20, 21)
	for _, level := range []int{-2, 0, 1, 2, 4, 6, 9} {
		var want []Boundary
		whole := compressWhole(t, level, in, 1<<30, func(b Boundary) { want = append(want, b) })
		var got []Boundary
		size, bits, err := Walk(bytes.NewReader(whole), func(b Boundary) { got = append(got, b) })
		if err != nil {
			t.Fatalf("level %d: %v", level, err)
		}
		if size != int64(len(in)) || (bits+7)/8 != int64(len(whole)) {
			t.Fatalf("level %d: walk found %d bytes in %d bits, want %d in %d bytes", level, size, bits, len(in), len(whole))
		}
		// The encoder does not report its closing blocks; the walk does.
		known := 0
		for i, w := range want {
			g := got[i]
			if g.In != w.In || g.Bit != w.Bit {
				t.Fatalf("level %d: boundary %d walked as %+v, encoder said %+v", level, i, g, w)
			}
			if level >= 2 && g.Win >= 0 {
				known++
				if g.Win != w.Win {
					t.Fatalf("level %d: boundary %d at %d: window index %d, encoder had %d", level, i, g.In, g.Win, w.Win)
				}
			}
		}
		if level >= 2 && known < len(want)*9/10 {
			t.Fatalf("level %d: window index known at %d of %d boundaries", level, known, len(want))
		}
	}
}
