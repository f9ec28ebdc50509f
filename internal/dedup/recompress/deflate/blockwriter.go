package deflate

import (
	"fmt"
	"io"
)

// BlockWriter writes DEFLATE blocks from their tokens exactly as this
// package's encoder writes them, without searching for matches: the
// restore path rebuilds a stream from the tokens and block types a
// Decoder found in it.
//
// Design. The block type is the caller's (the original's), never
// re-decided from sizes, so a stream whose types Go chose comes out bit
// for bit. A dynamic block's codes are what the encoder derives from the
// same tokens: huffmanEncoder.generate on their frequencies plus one
// end-of-block, generateCodegen, the code-length code limited to 7 bits,
// writeDynamicHeader; so any stream Go wrote re-encodes exactly, and
// SameCodes says beforehand whether another producer's block would. The
// output goes through the encoder's own huffmanBitWriter, which may start
// mid-byte: a segment whose first bits belong to the previous one.
type BlockWriter struct {
	w *huffmanBitWriter
}

// NewBlockWriter returns a BlockWriter writing to w from bit offset bit
// (0–7) of its first byte; the bits below it are written as zeros, for
// the previous segment to fill in (see Joiner).
func NewBlockWriter(w io.Writer, bit int) *BlockWriter {
	bw := &BlockWriter{w: newHuffmanBitWriter(w)}
	bw.Reset(w, bit)
	return bw
}

// Reset makes bw write to w from bit offset bit, keeping its buffers.
func (bw *BlockWriter) Reset(w io.Writer, bit int) {
	hw := bw.w
	hw.writer, hw.err = w, nil
	hw.bits, hw.nbits, hw.nbytes, hw.written = 0, uint(bit&7), 0, 0
}

// Bits is the length of the output so far in bits, the starting bit
// offset included.
func (bw *BlockWriter) Bits() int64 { return bw.w.bitsWritten() }

// Flush writes the pending bits, zero-padding the last byte; it ends the
// output (a block after it would start on a byte boundary).
func (bw *BlockWriter) Flush() error {
	if bw.w.err == nil {
		bw.w.writePending()
	}
	return bw.w.err
}

// Write writes b as its Type says, from b.Tokens or b.Stored.
func (bw *BlockWriter) Write(b *Block) error {
	switch b.Type {
	case BlockStored:
		return bw.WriteStored(b.Final, b.Stored)
	case BlockFixed:
		return bw.WriteFixed(b.Final, b.Tokens)
	case BlockDynamic:
		return bw.WriteDynamic(b.Final, b.Tokens)
	}
	return fmt.Errorf("deflate: write block of type %d", b.Type)
}

// WriteStored writes a stored block of data (at most 65535 bytes).
func (bw *BlockWriter) WriteStored(final bool, data []byte) error {
	if len(data) > maxStoreBlockSize {
		return fmt.Errorf("deflate: stored block of %d bytes", len(data))
	}
	bw.w.writeStoredHeader(len(data), final)
	bw.w.writeBytes(data)
	return bw.w.err
}

// WriteFixed writes tokens as a block with the fixed codes.
func (bw *BlockWriter) WriteFixed(final bool, tokens []Token) error {
	bw.w.writeFixedHeader(final)
	bw.writeTokens(tokens, fixedLiteralEncoding.codes, fixedOffsetEncoding.codes)
	return bw.w.err
}

// WriteDynamic writes tokens as a block with the codes Go's encoder
// derives from them.
func (bw *BlockWriter) WriteDynamic(final bool, tokens []Token) error {
	numLiterals, numOffsets, numCodegens := bw.codes(tokens)
	w := bw.w
	w.writeDynamicHeader(numLiterals, numOffsets, numCodegens, final)
	bw.writeTokens(tokens, w.literalEncoding.codes, w.offsetEncoding.codes)
	return w.err
}

// SameCodes reports whether writing b again gives back its header: for a
// dynamic block, whether the codes Go derives from its tokens are the ones
// it was sent with (code lengths, code-length code, header size). Fixed
// and stored blocks have nothing to derive and report true. Equal code
// lengths with a differently run-length-coded header of the same size
// would pass: the written bytes remain the proof.
func (bw *BlockWriter) SameCodes(b *Block) bool {
	if b.Type != BlockDynamic {
		return true
	}
	numLiterals, numOffsets, numCodegens := bw.codes(b.Tokens)
	w := bw.w
	if numLiterals != len(b.LitLens) || numOffsets != len(b.DistLens) || numCodegens != b.NumCodeLens {
		return false
	}
	for i, l := range b.LitLens {
		if w.literalEncoding.codes[i].len != uint16(l) {
			return false
		}
	}
	for i, l := range b.DistLens {
		if w.offsetEncoding.codes[i].len != uint16(l) {
			return false
		}
	}
	for i, l := range b.CodeLens {
		if w.codegenEncoding.codes[i].len != uint16(l) {
			return false
		}
	}
	header := 3 + 5 + 5 + 4 + 3*numCodegens +
		w.codegenEncoding.bitLength(w.codegenFreq[:]) +
		int(w.codegenFreq[16])*2 + int(w.codegenFreq[17])*3 + int(w.codegenFreq[18])*7
	return header == b.HeaderBits
}

// codes derives a dynamic block's codes from its tokens, as
// huffmanBitWriter.indexTokens and writeBlockDynamic do, counting the
// end-of-block marker without appending it to the caller's tokens.
func (bw *BlockWriter) codes(tokens []Token) (numLiterals, numOffsets, numCodegens int) {
	w := bw.w
	clear(w.literalFreq)
	clear(w.offsetFreq)
	lf := w.literalFreq[:maxNumLit]
	of := w.offsetFreq[:offsetCodeCount]
	for _, t := range tokens {
		if t < matchType {
			lf[byte(t)]++
			continue
		}
		lf[lengthCodesStart+lengthCodes[uint8(t>>lengthShift)]]++
		of[offsetCode(uint32(t)&offsetMask)]++
	}
	lf[endBlockMarker]++
	numLiterals = len(lf)
	for lf[numLiterals-1] == 0 {
		numLiterals--
	}
	numOffsets = len(of)
	for numOffsets > 0 && of[numOffsets-1] == 0 {
		numOffsets--
	}
	if numOffsets == 0 {
		of[0] = 1
		numOffsets = 1
	}
	w.literalEncoding.generate(w.literalFreq, 15)
	w.offsetEncoding.generate(w.offsetFreq, 15)
	w.generateCodegen(numLiterals, numOffsets, w.literalEncoding, w.offsetEncoding)
	w.codegenEncoding.generate(w.codegenFreq[:], 7)
	numCodegens = len(w.codegenFreq)
	for numCodegens > 4 && w.codegenFreq[codegenOrder[numCodegens-1]] == 0 {
		numCodegens--
	}
	return numLiterals, numOffsets, numCodegens
}

// writeTokens writes tokens and the end-of-block code.
func (bw *BlockWriter) writeTokens(tokens []Token, leCodes, oeCodes []hcode) {
	bw.w.writeTokens(internalTokens(tokens), leCodes, oeCodes)
	bw.w.writeCode(leCodes[endBlockMarker])
}
