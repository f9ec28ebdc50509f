package deflate

import (
	"bytes"
	stdflate "compress/flate"
	"fmt"
	"io"
	"testing"
)

// BenchmarkInflate compares inflating a level-6 stream (a parse frame's
// body) with compress/flate and with Decoder, tokens kept (a restore
// following the parse) or not (one that does not); and, in files-8k and
// files-32k, inflating the same bytes as streams of 8 or 32 KiB each,
// tokens kept, as a restore reads the parse frames of a layer's small
// files: there each stream's dynamic header and tables weigh as much as
// its tokens.
func BenchmarkInflate(b *testing.B) {
	in := goSource(b, 8<<20)
	stream := compressWhole(b, 6, in, 1<<30, nil)
	b.Run("stdlib", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			r := stdflate.NewReader(bytes.NewReader(stream))
			if n, err := io.Copy(io.Discard, r); err != nil || n != int64(len(in)) {
				b.Fatal(n, err)
			}
		}
	})
	for _, skip := range []bool{false, true} {
		name := "decoder"
		if skip {
			name = "decoder-bytes-only"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			dst := make([]byte, 0, len(in)+DstSlack)
			for b.Loop() {
				d := NewDecoder(stream)
				if skip {
					d.SkipTokens()
				}
				out, err := d.DecodeAll(dst, nil)
				if err != nil || len(out) != len(in) {
					b.Fatal(len(out), err)
				}
			}
		})
	}
	// Parse frames of 8 and 32 KiB files.
	for _, small := range []int{8 << 10, 32 << 10} {
		var streams [][]byte
		for p := in; len(p) > 0; p = p[min(small, len(p)):] {
			streams = append(streams, compressWhole(b, 6, p[:min(small, len(p))], 1<<30, nil))
		}
		b.Run(fmt.Sprintf("files-%dk", small>>10), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			dst := make([]byte, 0, small+DstSlack)
			toks := make([]Token, 0, small)
			d := NewDecoder(nil)
			for b.Loop() {
				n := 0
				for _, s := range streams {
					d.Reset(s)
					d.AppendTokens(toks[:0])
					out, err := d.DecodeAll(dst, nil)
					if err != nil {
						b.Fatal(err)
					}
					n += len(out)
				}
				if n != len(in) {
					b.Fatal(n)
				}
			}
		})
	}
}
