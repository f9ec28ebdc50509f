package deflate

import (
	"bytes"
	stdflate "compress/flate"
	"io"
	"testing"
)

// BenchmarkInflate compares inflating a level-6 stream (a parse frame's
// body) with compress/flate and with Decoder, tokens kept (a restore
// following the parse) or not (one that does not).
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
}
