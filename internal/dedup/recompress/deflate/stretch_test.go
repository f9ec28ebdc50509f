package deflate

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
)

// allTokens is every token the level's encoder writes for data.
func allTokens(t testing.TB, level int, data []byte) []token {
	t.Helper()
	var out []token
	err := SearchStretch(level, nil, 0, data, len(data), true, func(ts []Token) error {
		out = append(out, internalTokens(ts)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSearchStretch(t *testing.T) {
	data := goSource(t, raceScale(6<<20))
	for _, level := range []int{4, 6, 9}[:raceScale(3)] {
		toks := allTokens(t, level, data)
		// ends[i] is where token i ends.
		ends := make([]int, len(toks))
		at := 0
		for i, tk := range toks {
			at += tk.size()
			ends[i] = at
		}
		if at != len(data) {
			t.Fatalf("level %d: tokens cover %d bytes of %d", level, at, len(data))
		}
		// Stretches from the end of any token (with a known window index)
		// to the end of a later one, some reaching the stream's end.
		rng := rand.New(rand.NewPCG(1, uint64(level)))
		tried := 0
		for tried < raceScale(60) {
			i := rng.IntN(len(toks) - 1)
			x := ends[i]
			win := winAt(int64(x))
			if win < 0 {
				continue
			}
			j := min(len(toks)-1, i+1+rng.IntN(40000))
			if tried%10 == 0 {
				j = len(toks) - 1
			}
			y := ends[j]
			tried++
			final := y+StretchLookahead > len(data)
			in := data[x:]
			if !final {
				in = data[x : y+StretchLookahead]
			}
			var got []token
			err := SearchStretch(level, data[:x], win, in, y-x, final, func(ts []Token) error {
				got = append(got, internalTokens(ts)...)
				return nil
			})
			if err != nil {
				t.Fatalf("level %d stretch %d–%d: %v", level, x, y, err)
			}
			want := toks[i+1 : j+1]
			if len(got) != len(want) {
				t.Fatalf("level %d stretch %d–%d: %d tokens, want %d", level, x, y, len(got), len(want))
			}
			for k := range got {
				if got[k] != want[k] {
					t.Fatalf("level %d stretch %d–%d: token %d is %#x, want %#x", level, x, y, k, got[k], want[k])
				}
			}
		}
	}
}

// TestSearchStretchDiverges: a stretch whose end is inside a token fails,
// never emits a token past its end.
func TestSearchStretchDiverges(t *testing.T) {
	data := goSource(t, 1<<20)
	toks := allTokens(t, 6, data)
	at := 0
	for _, tk := range toks[:len(toks)/2] {
		at += tk.size()
	}
	for k := len(toks) / 2; ; k++ {
		if toks[k] >= matchType {
			break
		}
		at++
	}
	// at is the start of a match: one byte into it is inside.
	err := SearchStretch(6, nil, 0, data, at+1, false, func([]Token) error { return nil })
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("a stretch ending inside a match: %v, want ErrDiverged", err)
	}
	// Without its history the same stretch is parsed otherwise: the
	// window is what makes the tokens the stream's.
	mid := 0
	for _, tk := range toks[:len(toks)/4] {
		mid += tk.size()
	}
	var cold []token
	_ = SearchStretch(6, nil, 0, data[mid:], len(data)-mid, true, func(ts []Token) error {
		cold = append(cold, internalTokens(ts)...)
		return nil
	})
	if len(cold) == len(toks)-len(toks)/4 && slices.Equal(cold, toks[len(toks)/4:]) {
		t.Fatal("a stretch searched without its history gave the stream's tokens")
	}
	if err := SearchStretch(1, nil, 0, data, 10, true, func([]Token) error { return nil }); !errors.Is(err, ErrNotSearchable) {
		t.Fatalf("level 1: %v, want ErrNotSearchable", err)
	}
}

func BenchmarkSearchStretch(b *testing.B) {
	data := goSource(b, 16<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := SearchStretch(6, nil, 0, data, len(data), true, func([]Token) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// TestKeepTokens: input that does not compress is stored by default and
// Huffman-coded with KeepTokens, whose stream still inflates to it and
// holds the tokens the matcher chose.
func TestKeepTokens(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	in := make([]byte, 300<<10)
	for i := range in {
		in[i] = byte(rng.Uint32())
	}
	copy(in[200<<10:], in[:10<<10]) // some matches too
	types := func(keep bool) (stored, coded int, tokens []token) {
		var b bytes.Buffer
		w, err := NewWriter(&b, 6)
		if err != nil {
			t.Fatal(err)
		}
		if keep {
			w.KeepTokens()
		}
		w.Write(in)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		d := NewDecoder(b.Bytes())
		var out []byte
		for {
			blk, dst, err := d.Next(out)
			out = dst
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if blk.Type == BlockStored {
				stored += len(blk.Stored)
			} else {
				coded++
				tokens = append(tokens, internalTokens(blk.Tokens)...)
			}
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("keep %v: inflated bytes differ", keep)
		}
		return stored, coded, tokens
	}
	if stored, _, _ := types(false); stored == 0 {
		t.Fatal("random input was not stored without KeepTokens: the test proves nothing")
	}
	stored, _, got := types(true)
	if stored != 0 {
		t.Fatalf("KeepTokens stored %d bytes", stored)
	}
	if want := allTokens(t, 6, in); !slices.Equal(got, want) {
		t.Fatalf("KeepTokens stream holds %d tokens, the matcher chose %d (or others)", len(got), len(want))
	}
}
