package deflate

import (
	"bytes"
	"io"
	"slices"
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
			eachBlock(b, &d, stream, dst[:0], nil)
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
			eachBlock(b, &d, stream, dst[:0], func(blk *Block) { bw.Write(blk) })
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

// BenchmarkWriteHeaders reports MB/s of uncompressed bytes for the
// restore's Huffman stage alone: each dynamic block of a level-6 stream
// of Go sources written again from its stored header and tokens (the
// stream's one other block, the empty stored block that ends it, as is).
func BenchmarkWriteHeaders(b *testing.B) {
	in, stream := benchInput(b)
	type blk struct {
		h      *BlockHeader
		tokens []token
		final  bool
	}
	var blks []blk
	var d Decoder
	eachBlock(b, &d, stream, make([]byte, 0, len(in)+outSlack), func(bl *Block) {
		switch {
		case bl.Type == BlockStored && bl.Size == 0:
			blks = append(blks, blk{final: bl.Final})
		case bl.Type == BlockDynamic && !bl.Final:
			h, err := HeaderOf(stream, bl)
			if err != nil {
				b.Fatal(err)
			}
			blks = append(blks, blk{h: &h, tokens: slices.Clone(internalTokens(bl.Tokens))})
		default:
			b.Fatalf("a %s block (final %v) in a level-6 stream of Go sources", bl.Type, bl.Final)
		}
	})
	var buf bytes.Buffer
	buf.Grow(len(stream) + 64)
	bw := NewBlockWriter(&buf, 0)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		buf.Reset()
		bw.Reset(&buf, 0)
		for _, bl := range blks {
			if bl.h == nil {
				bw.WriteStored(bl.final, nil)
			} else if !bw.w.writeBlockHeader(bl.tokens, bl.h) {
				b.Fatal("header not read")
			}
		}
		bw.Flush()
	}
	if !bytes.Equal(buf.Bytes(), stream) {
		b.Fatal("written blocks differ from the stream")
	}
}
