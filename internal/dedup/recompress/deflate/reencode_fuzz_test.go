package deflate

import (
	"bufio"
	"bytes"
	stdflate "compress/flate"
	"errors"
	"io"
	"slices"
	"testing"
)

// FuzzDecodeReencode: whatever the input and level, this package's
// stream decodes to the input and its blocks re-encode to the stream.
func FuzzDecodeReencode(f *testing.F) {
	f.Add([]byte{}, 6)
	f.Add([]byte("x"), 1)
	f.Add(bytes.Repeat([]byte("abcabcabd"), 2000), 6)
	f.Add(layerLike(70<<10, 13), 9)
	f.Add(layerLike(40<<10, 14), -2)
	f.Add(make([]byte, 100<<10), 2)
	f.Fuzz(func(t *testing.T, in []byte, level int) {
		level = level%12 - 2 // -2 … 9
		if level < -2 {
			level += 12
		}
		var b bytes.Buffer
		w, err := NewWriter(&b, level)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(in)
		w.Close()
		out, inflated, _ := reencode(t, b.Bytes())
		if !bytes.Equal(inflated, in) {
			t.Fatalf("level %d: inflated bytes differ from the input", level)
		}
		if !bytes.Equal(out, b.Bytes()) {
			t.Fatalf("level %d: re-encoded stream differs at byte %d of %d", level, firstDiff(out, b.Bytes()), b.Len())
		}
	})
}

// FuzzDecode: the decoder never panics on arbitrary input, fails only
// with ErrCorrupt, and accepts exactly the streams compress/flate reads
// whole, inflating them to the same bytes and ending in the same byte; fed
// from a reader in chunks, and keeping no tokens, it decodes the same, and
// appending every block's tokens to one slice, the same tokens.
func FuzzDecode(f *testing.F) {
	in := layerLike(40<<10, 15)
	for _, level := range []int{-2, 0, 1, 2, 6, 9} {
		var b bytes.Buffer
		w, _ := NewWriter(&b, level)
		w.Write(in[:1000+level*3000+6000])
		w.Close()
		f.Add(b.Bytes())
		f.Add(b.Bytes()[:b.Len()/2])
	}
	f.Add([]byte{0x03, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(data)
		var got []byte
		var err error
		var toks []Token // every block's, and where each block's start
		var marks []Mark
		for {
			var out []byte
			var b *Block
			b, out, err = d.Next(got)
			got = out
			if err != nil {
				break
			}
			if len(b.Tokens) > 0 {
				marks = append(marks, Mark{Token: len(toks), In: b.In})
			}
			toks = append(toks, b.Tokens...)
		}
		if err == io.EOF {
			err = nil
		}
		// Appending to one slice (grown from 3) gives the same tokens.
		ad := NewDecoder(data)
		ad.AppendTokens(make([]Token, 0, 3))
		var agot []byte
		for {
			b, out, aerr := ad.Next(agot)
			agot = out
			if aerr != nil {
				break
			}
			if n := len(ad.Tokens()); !slices.Equal(b.Tokens, ad.Tokens()[n-len(b.Tokens):]) {
				t.Fatal("AppendTokens: a block's tokens are not the tail of the slice")
			}
		}
		if !slices.Equal(ad.Tokens(), toks) || !slices.Equal(ad.Marks(), marks) || !bytes.Equal(agot, got) {
			t.Fatalf("AppendTokens: %d tokens, %d marks, %d bytes; block by block %d, %d, %d", len(ad.Tokens()), len(ad.Marks()), len(agot), len(toks), len(marks), len(got))
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error not ErrCorrupt: %v", err)
		}
		// Walk, fed in 16-byte chunks, agrees.
		size, bits, werr := Walk(bufio.NewReaderSize(bytes.NewReader(data), 16), nil)
		if (werr == nil) != (err == nil) || werr == nil && (size != int64(len(got)) || bits != d.Bits()) {
			t.Fatalf("Walk over a bufio.Reader: %d bytes, %d bits, %v; decoder %d, %d, %v", size, bits, werr, len(got), d.Bits(), err)
		}
		// A stream decoder fed in 5-byte chunks, keeping no tokens,
		// agrees too.
		sd := NewStreamDecoder(bytes.NewReader(data), make([]byte, 5))
		sd.SkipTokens()
		var sgot []byte
		var serr error
		for serr == nil {
			var b *Block
			b, sgot, serr = sd.Next(sgot)
			if serr == nil && len(b.Tokens) > 0 {
				t.Fatalf("SkipTokens: a block kept %d tokens", len(b.Tokens))
			}
		}
		if serr == io.EOF {
			serr = nil
		}
		if (serr == nil) != (err == nil) || serr != nil && !errors.Is(serr, ErrCorrupt) || !bytes.Equal(sgot, got) {
			t.Fatalf("stream decoder: %d bytes, %v; decoder %d, %v", len(sgot), serr, len(got), err)
		}
		br := bytes.NewReader(data)
		want, ferr := io.ReadAll(stdflate.NewReader(br))
		switch {
		case ferr != nil && err == nil:
			t.Fatalf("decoder accepts what compress/flate refuses: %v", ferr)
		case ferr == nil && err != nil:
			t.Fatalf("compress/flate inflates %d bytes, decoder fails: %v", len(want), err)
		case err == nil:
			if !bytes.Equal(got, want) {
				t.Fatalf("decoder inflates %d bytes, compress/flate %d different", len(got), len(want))
			}
			if end := int64(len(data) - br.Len()); (d.Bits()+7)/8 != end {
				t.Fatalf("decoder ends in byte %d, compress/flate after %d", (d.Bits()+7)/8, end)
			}
		}
	})
}
