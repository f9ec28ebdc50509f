package deflate

import (
	"errors"
	"fmt"
)

// Stored block headers. Go's encoder derives each dynamic block's codes
// from the block's tokens: a histogram, two Huffman constructions, the
// code-length code, and sizes to choose between dynamic, fixed and stored.
// A rebuild that knows the original's blocks can skip all of it: the
// original's header (its code lengths, run-length and Huffman coded as
// the stream sends them, a few dozen bytes per block of ~16K tokens) is
// written back verbatim and the codes are read from it. A header belongs
// to the block starting at its input offset; the bits written are the
// original's only if the tokens are, which the check that stores headers
// proves once and the blob's digest on every restore.

// BlockHeader is a dynamic block's header as the original stream sends it:
// Bits bits (in Data, first bit lowest) after the 3-bit block type, for
// the block whose input starts at offset In.
type BlockHeader struct {
	In   int64  `json:"i"`
	Bits int    `json:"n"`
	Data []byte `json:"d"`
}

// HeaderOf returns dynamic block b's header, read from src, the stream
// bytes b.Bit counts from (as a Decoder's src).
func HeaderOf(src []byte, b *Block) (BlockHeader, error) {
	n := b.HeaderBits - 3
	if b.Type != BlockDynamic || n <= 0 {
		return BlockHeader{}, fmt.Errorf("deflate: no dynamic header in a %s block", b.Type)
	}
	from := b.Bit + 3
	if (from+int64(n)+7)/8 > int64(len(src)) {
		return BlockHeader{}, errors.New("deflate: header past the input")
	}
	out := make([]byte, (n+7)/8)
	for i := range n {
		bit := from + int64(i)
		if src[bit/8]>>(bit%8)&1 != 0 {
			out[i/8] |= 1 << (i % 8)
		}
	}
	return BlockHeader{In: b.In, Bits: n, Data: out}, nil
}

// headerCodes reads the code lengths h sends with d (kept by the caller,
// so that its tables are built into the same buffers block after block)
// and sets lit and off to the canonical codes they give, as a decoder
// would read them.
func headerCodes(d *Decoder, h *BlockHeader, lit, off *huffmanEncoder) error {
	if h.Bits <= 0 || (h.Bits+7)/8 != len(h.Data) {
		return errors.New("deflate: malformed stored header")
	}
	// The header's own bits, behind the 3 of the block type it follows,
	// then padding the decoder may load ahead.
	src := make([]byte, len(h.Data)+9)
	src[0] = 4 // a non-final dynamic block
	for i := range h.Bits {
		if h.Data[i/8]>>(i%8)&1 != 0 {
			src[(i+3)/8] |= 1 << ((i + 3) % 8)
		}
	}
	d.Reset(src)
	if _, err := d.take(3); err != nil {
		return err
	}
	var b Block
	b.Type = BlockDynamic
	if err := d.dynamicHeader(&b); err != nil {
		return err
	}
	if d.Bits() != int64(h.Bits)+3 {
		return fmt.Errorf("deflate: stored header of %d bits reads as %d", h.Bits, d.Bits()-3)
	}
	canonical(lit, b.LitLens)
	canonical(off, b.DistLens)
	return nil
}

// canonical sets h's codes to the canonical Huffman code of lens (RFC 1951
// 3.2.2), bit-reversed as the writer sends them.
func canonical(h *huffmanEncoder, lens []uint8) {
	var count [maxBitsLimit + 1]uint16
	for _, l := range lens {
		count[l]++
	}
	count[0] = 0
	var next [maxBitsLimit + 1]uint16
	code := uint16(0)
	for l := 1; l <= maxBitsLimit; l++ {
		code = (code + count[l-1]) << 1
		next[l] = code
	}
	for i := range h.codes {
		h.codes[i] = hcode{}
	}
	for i, l := range lens {
		if l == 0 {
			continue
		}
		h.codes[i] = hcode{code: reverseBits(next[l], l), len: uint16(l)}
		next[l]++
	}
}

// writeBlockHeader writes tokens as a dynamic block with header h: the
// block type, h's bits verbatim, the tokens in the codes h sends, the
// end of the block. Tokens are not checked against the codes: tokens
// other than the original's give other bits whatever the codes, which
// the digest catches. It reports false, writing nothing, when h cannot be
// read.
func (w *huffmanBitWriter) writeBlockHeader(tokens []token, h *BlockHeader) bool {
	if w.err != nil || headerCodes(&w.headerDec, h, w.literalEncoding, w.offsetEncoding) != nil {
		return false
	}
	lc, oc := w.literalEncoding.codes, w.offsetEncoding.codes
	if lc[endBlockMarker].len == 0 {
		return false
	}
	w.writeBits(4, 3)
	for i := 0; i < h.Bits; i += 8 {
		n := min(8, h.Bits-i)
		w.writeBits(int32(h.Data[i/8])&(1<<n-1), uint(n))
	}
	w.writeTokens(tokens, lc, oc)
	w.writeCode(lc[endBlockMarker])
	return true
}
