package parsebench

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// Kind says what a token is.
type Kind uint8

// Token kinds. Stored is a run of bytes from a stored block: the encoder's
// tokens there are not in the stream, and its bytes are literals to anyone
// comparing parses.
const (
	Literal Kind = iota
	Match
	Stored
)

// Token is one decoded token of a DEFLATE stream.
type Token struct {
	// Off is the offset in the uncompressed output of the token's first byte.
	Off  int64
	Kind Kind
	// Len is the number of bytes the token produces: 1 for a literal,
	// 3–258 for a match, the run's length for stored bytes.
	Len int
	// Dist is a match's distance (1–32768), 0 otherwise.
	Dist int
}

// BlockType is a DEFLATE block's BTYPE.
type BlockType uint8

// Block types of RFC 1951.
const (
	BlockStored  BlockType = 0
	BlockFixed   BlockType = 1
	BlockDynamic BlockType = 2
)

// Block describes one block of a stream, reported before its tokens.
type Block struct {
	Type  BlockType
	Final bool
	// Off is the uncompressed offset of the block's first byte.
	Off int64
	// Bit is the stream bit offset of the block's 3-bit header.
	Bit int64
	// HeaderBits is what the block spends before its first symbol: the
	// 3-bit header plus, for dynamic blocks, the code-lengths section, and
	// for stored blocks the padding and LEN/NLEN.
	HeaderBits int
	// LitLens and DistLens are a dynamic block's code lengths (HLIT and
	// HDIST of them); they are the callee's to keep.
	LitLens, DistLens []uint8
}

// Visitor receives a stream's blocks and tokens in order; either may be nil.
type Visitor struct {
	Block func(Block)
	Token func(Token)
}

// ErrCorrupt means the input is not a valid DEFLATE stream.
var ErrCorrupt = errors.New("parsebench: corrupt deflate stream")

// Inflate decodes the raw DEFLATE stream at the start of src with
// deflate.Decoder, appending its output to dst, and reports its blocks and
// tokens to v. It returns the extended dst and how many bytes of src the
// stream spans (up to and including the byte holding its last bit). Token
// offsets are offsets in the returned slice, so a caller that keeps dst
// across streams gets offsets continuing from one to the next; matches may
// not reach before the start of this stream.
func Inflate(dst, src []byte, v Visitor) ([]byte, int, error) {
	base := int64(len(dst))
	d := deflate.NewDecoder(src)
	for {
		b, out, err := d.Next(dst)
		dst = out
		if errors.Is(err, io.EOF) {
			return dst, int((d.Bits() + 7) / 8), nil
		}
		if err != nil {
			return dst, 0, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		off := base + b.In
		if v.Block != nil {
			v.Block(Block{
				Type: BlockType(b.Type), Final: b.Final, Off: off, Bit: b.Bit, HeaderBits: b.HeaderBits,
				LitLens: slices.Clone(b.LitLens), DistLens: slices.Clone(b.DistLens),
			})
		}
		if v.Token == nil {
			continue
		}
		if b.Type == deflate.BlockStored {
			if len(b.Stored) > 0 {
				v.Token(Token{Off: off, Kind: Stored, Len: len(b.Stored)})
			}
			continue
		}
		for _, t := range b.Tokens {
			tk := Token{Off: off, Kind: Literal, Len: 1}
			if t.IsMatch() {
				tk = Token{Off: off, Kind: Match, Len: t.Length(), Dist: t.Dist()}
			}
			v.Token(tk)
			off += int64(tk.Len)
		}
	}
}
