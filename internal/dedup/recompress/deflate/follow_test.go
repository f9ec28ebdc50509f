package deflate

import (
	"bytes"
	stdflate "compress/flate"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// sliceSource is a TokenSource over stretches held in memory.
type sliceSource struct {
	offs   []int64
	tokens [][]Token
}

func (s *sliceSource) Next() (int64, []Token, bool) {
	if len(s.offs) == 0 {
		return 0, nil, false
	}
	off, ts := s.offs[0], s.tokens[0]
	s.offs, s.tokens = s.offs[1:], s.tokens[1:]
	return off, ts, true
}

// stretchesOf picks random stretches of whole tokens of toks (n of them
// at most), in order, as a rebuild's stored parses would give them.
func stretchesOf(rng *rand.Rand, toks []token, n int) *sliceSource {
	src := &sliceSource{}
	at, pos := 0, int64(0)
	for range n {
		skip := rng.IntN(len(toks)/n + 1)
		take := rng.IntN(2*len(toks)/n + 1)
		for k := 0; k < skip && at < len(toks); k++ {
			pos += int64(toks[at].size())
			at++
		}
		if at >= len(toks) {
			break
		}
		take = min(take, len(toks)-at)
		ts := make([]Token, take)
		for k := range take {
			ts[k] = Token(toks[at+k])
		}
		src.offs = append(src.offs, pos)
		src.tokens = append(src.tokens, ts)
		for k := 0; k < take; k++ {
			pos += int64(toks[at].size())
			at++
		}
	}
	return src
}

func compressed(t testing.TB, level int, in []byte) []byte {
	var b bytes.Buffer
	w, err := NewWriter(&b, level)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(in)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestCompressFollowing: with any stretches of the stream's own tokens
// known, the output is the encoder's stream bit for bit.
func TestCompressFollowing(t *testing.T) {
	inputs := map[string][]byte{
		"source": goSource(t, raceScale(3<<20)),
		"layer":  layerLike(raceScale(2<<20), 21),
		"zeros":  make([]byte, 300<<10),
	}
	random := make([]byte, 200<<10)
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	inputs["random"] = append(random, inputs["layer"][:100<<10]...) // stored blocks, then text
	for name, in := range inputs {
		for _, level := range []int{4, 6, 9} {
			want := compressed(t, level, in)
			toks := allTokens(t, level, in)
			for _, n := range []int{1, 7, 300} {
				var got bytes.Buffer
				if err := CompressFollowing(&got, level, in, stretchesOf(rng, toks, n)); err != nil {
					t.Fatalf("%s level %d, %d stretches: %v", name, level, n, err)
				}
				if !bytes.Equal(got.Bytes(), want) {
					t.Fatalf("%s level %d, %d stretches: the stream differs from the encoder's", name, level, n)
				}
			}
			// Everything known: no search at all.
			var got bytes.Buffer
			all := &sliceSource{offs: []int64{0}, tokens: [][]Token{searchedTokens(toks)}}
			if err := CompressFollowing(&got, level, in, all); err != nil || !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("%s level %d, every token known: %v, same %v", name, level, err, bytes.Equal(got.Bytes(), want))
			}
		}
	}
}

// TestCompressFollowingWrong: a stretch that does not start at a token
// boundary fails; other tokens than the encoder's give another stream of
// the same input, never a wrong one.
func TestCompressFollowingWrong(t *testing.T) {
	in := goSource(t, 1<<20)
	toks := allTokens(t, 6, in)
	pos, k := int64(0), 0
	for ; k < len(toks)/2 || toks[k] < matchType; k++ {
		pos += int64(toks[k].size())
	}
	// pos is the start of a match: one byte into it is not a boundary.
	inside := &sliceSource{offs: []int64{pos + 1}, tokens: [][]Token{{LiteralToken(in[pos+1])}}}
	if err := CompressFollowing(io.Discard, 6, in, inside); !errors.Is(err, ErrDiverged) {
		t.Fatalf("a stretch inside a match: %v, want ErrDiverged", err)
	}
	// The match spelled as literals: valid, but not the encoder's stream.
	n := toks[k].size()
	lits := make([]Token, n)
	for i := range lits {
		lits[i] = LiteralToken(in[pos+int64(i)])
	}
	var got bytes.Buffer
	if err := CompressFollowing(&got, 6, in, &sliceSource{offs: []int64{pos}, tokens: [][]Token{lits}}); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got.Bytes(), compressed(t, 6, in)) {
		t.Fatal("other tokens gave the encoder's stream: the test proves nothing")
	}
	back, err := io.ReadAll(stdflate.NewReader(&got))
	if err != nil || !bytes.Equal(back, in) {
		t.Fatalf("other tokens gave a stream that inflates to something else (%v)", err)
	}
	// A stretch past the input.
	past := &sliceSource{offs: []int64{int64(len(in)) + 10}, tokens: [][]Token{{LiteralToken('x')}}}
	if err := CompressFollowing(io.Discard, 6, in, past); !errors.Is(err, ErrDiverged) {
		t.Fatalf("a stretch past the input: %v, want ErrDiverged", err)
	}
}

// BenchmarkCompressFollowing compares a level-6 rebuild that knows every
// token, or 80% of them in stretches, with the search it replaces.
func BenchmarkCompressFollowing(b *testing.B) {
	in := goSource(b, 16<<20)
	toks := allTokens(b, 6, in)
	b.Run("search", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			w, _ := NewWriter(io.Discard, 6)
			w.Write(in)
			w.Close()
		}
	})
	b.Run("known-all", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			all := &sliceSource{offs: []int64{0}, tokens: [][]Token{searchedTokens(toks)}}
			if err := CompressFollowing(io.Discard, 6, in, all); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("known-80pct", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			// 2000 stretches, each a fifth searched then four fifths known.
			src := &sliceSource{}
			per := len(toks) / 2000
			pos, at := int64(0), 0
			for at+per <= len(toks) {
				for k := 0; k < per/5; k++ {
					pos += int64(toks[at].size())
					at++
				}
				src.offs = append(src.offs, pos)
				src.tokens = append(src.tokens, searchedTokens(toks[at:at+per-per/5]))
				for k := 0; k < per-per/5; k++ {
					pos += int64(toks[at].size())
					at++
				}
			}
			if err := CompressFollowing(io.Discard, 6, in, src); err != nil {
				b.Fatal(err)
			}
		}
	})
}
