package deflate

import (
	"bytes"
	"io"
	"testing"
)

// benchInput is 16 MiB of the toolchain's source, compressed at level 6:
// realistic text, the restore path's common case.
func benchInput(b *testing.B) (in, stream []byte) {
	b.Helper()
	in = goSource(b, 16<<20)
	return in, compressWhole(b, 6, in, 1<<30, nil)
}

// BenchmarkReencode reports MB/s of uncompressed bytes: compressing at
// level 6 (what a rebuild costs today), decoding only, and decoding plus
// re-encoding every block (the restore path without match search).
func BenchmarkReencode(b *testing.B) {
	in, stream := benchInput(b)
	b.Run("compress6", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		b.ReportAllocs()
		for b.Loop() {
			w, _ := NewWriter(io.Discard, 6)
			w.Write(in)
			w.Close()
		}
	})
	dst := make([]byte, 0, len(in)+outSlack)
	var d Decoder
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		b.ReportAllocs()
		for b.Loop() {
			d.Reset(stream)
			out := dst[:0]
			for {
				_, o, err := d.Next(out)
				out = o
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("decode+reencode", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		b.ReportAllocs()
		var buf bytes.Buffer
		buf.Grow(len(stream) + 64)
		bw := NewBlockWriter(&buf, 0)
		for b.Loop() {
			buf.Reset()
			bw.Reset(&buf, 0)
			d.Reset(stream)
			out := dst[:0]
			for {
				blk, o, err := d.Next(out)
				out = o
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				bw.Write(blk)
			}
			bw.Flush()
		}
		if !bytes.Equal(buf.Bytes(), stream) {
			b.Fatal("re-encoded stream differs")
		}
	})
	b.Run("walk", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := Walk(bytes.NewReader(stream), nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
