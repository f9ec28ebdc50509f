package parsebench

import (
	"errors"
	"fmt"
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

const (
	maxCodeLen = 15
	numLit     = 288 // literal/length alphabet incl. the two invalid codes
	numDist    = 32  // distance alphabet incl. the two invalid codes
	windowSize = 1 << 15
)

// Length and distance bases and extra bits, RFC 1951 section 3.2.5.
var (
	lenBase  = [29]uint16{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lenExtra = [29]uint8{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}

	distBase  = [30]uint16{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra = [30]uint8{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}

	// clOrder is the order in which code-length code lengths are sent.
	clOrder = [19]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}
)

// Inflate decodes the raw DEFLATE stream at the start of src, appending
// its output to dst, and reports its blocks and tokens to v. It returns
// the extended dst and how many bytes of src the stream spans (up to and
// including the byte holding its last bit). Token offsets are offsets in
// the returned slice, so a caller that keeps dst across streams gets
// offsets continuing from one to the next; matches may not reach before
// the start of this stream.
//
// Huffman codes are decoded with one table per code indexed by as many
// bits as its longest code: simple, and a block's tables cost about as
// much to build as a block's worth of output to write.
func Inflate(dst, src []byte, v Visitor) ([]byte, int, error) {
	d := &inflater{br: bitReader{src: src}, out: dst, start: len(dst), v: v}
	if err := d.run(); err != nil {
		return d.out, 0, fmt.Errorf("%w at bit %d: %w", ErrCorrupt, d.br.bitPos(), err)
	}
	return d.out, int((d.br.bitPos() + 7) / 8), nil
}

type inflater struct {
	br        bitReader
	out       []byte
	start     int // len(out) when this stream began
	v         Visitor
	lit, dist huffman
	fixedLit  []uint8
	fixedDist []uint8
}

func (d *inflater) run() error {
	for {
		bit := d.br.bitPos()
		if err := d.br.need(3); err != nil {
			return err
		}
		final := d.br.take(1) == 1
		typ := BlockType(d.br.take(2))
		b := Block{Type: typ, Final: final, Off: int64(len(d.out)), Bit: bit}
		var err error
		switch typ {
		case BlockStored:
			err = d.stored(&b)
		case BlockFixed:
			d.fixedCodes()
			err = d.huffmanBlock(&b)
		case BlockDynamic:
			if err = d.dynamicCodes(&b); err == nil {
				err = d.huffmanBlock(&b)
			}
		default:
			err = errors.New("reserved block type 3")
		}
		if err != nil {
			return err
		}
		if final {
			return nil
		}
	}
}

// report sends b to the visitor once its header has been read.
func (d *inflater) report(b *Block) {
	b.HeaderBits = int(d.br.bitPos() - b.Bit)
	if d.v.Block != nil {
		d.v.Block(*b)
	}
}

func (d *inflater) stored(b *Block) error {
	d.br.alignToByte()
	if err := d.br.need(32); err != nil {
		return err
	}
	n := d.br.take(16)
	if nn := d.br.take(16); nn != ^n&0xffff {
		return fmt.Errorf("stored block LEN %#x NLEN %#x", n, nn)
	}
	d.report(b)
	// The bit reader holds no partial byte here: copy straight from src.
	raw, err := d.br.bytes(int(n))
	if err != nil {
		return err
	}
	if n > 0 && d.v.Token != nil {
		d.v.Token(Token{Off: int64(len(d.out)), Kind: Stored, Len: int(n)})
	}
	d.out = append(d.out, raw...)
	return nil
}

func (d *inflater) fixedCodes() {
	if d.fixedLit == nil {
		d.fixedLit = make([]uint8, numLit)
		for i := range d.fixedLit {
			switch {
			case i < 144:
				d.fixedLit[i] = 8
			case i < 256:
				d.fixedLit[i] = 9
			case i < 280:
				d.fixedLit[i] = 7
			default:
				d.fixedLit[i] = 8
			}
		}
		d.fixedDist = make([]uint8, numDist)
		for i := range d.fixedDist {
			d.fixedDist[i] = 5
		}
	}
	// Both fixed codes are complete: init cannot fail.
	_ = d.lit.init(d.fixedLit)
	_ = d.dist.init(d.fixedDist)
}

func (d *inflater) dynamicCodes(b *Block) error {
	if err := d.br.need(14); err != nil {
		return err
	}
	nlit := int(d.br.take(5)) + 257
	ndist := int(d.br.take(5)) + 1
	nclen := int(d.br.take(4)) + 4
	if nlit > 286 || ndist > 30 {
		return fmt.Errorf("HLIT %d HDIST %d out of range", nlit, ndist)
	}
	var clLens [19]uint8
	for i := range nclen {
		if err := d.br.need(3); err != nil {
			return err
		}
		clLens[clOrder[i]] = uint8(d.br.take(3))
	}
	var cl huffman
	if err := cl.init(clLens[:]); err != nil {
		return fmt.Errorf("code-length code: %w", err)
	}
	lens := make([]uint8, nlit+ndist)
	for i := 0; i < len(lens); {
		sym, err := cl.decode(&d.br)
		if err != nil {
			return err
		}
		if sym < 16 {
			lens[i] = uint8(sym)
			i++
			continue
		}
		var rep int
		var val uint8
		switch sym {
		case 16:
			if i == 0 {
				return errors.New("repeat code 16 with no previous length")
			}
			val = lens[i-1]
			rep, err = d.extra(2, 3)
		case 17:
			rep, err = d.extra(3, 3)
		default:
			rep, err = d.extra(7, 11)
		}
		if err != nil {
			return err
		}
		if i+rep > len(lens) {
			return errors.New("code lengths overrun HLIT+HDIST")
		}
		for range rep {
			lens[i] = val
			i++
		}
	}
	b.LitLens, b.DistLens = lens[:nlit:nlit], lens[nlit:]
	if b.LitLens[256] == 0 {
		return errors.New("no code for end of block")
	}
	if err := d.lit.init(b.LitLens); err != nil {
		return fmt.Errorf("literal/length code: %w", err)
	}
	if err := d.dist.init(b.DistLens); err != nil {
		return fmt.Errorf("distance code: %w", err)
	}
	return nil
}

// extra reads n extra bits and adds base.
func (d *inflater) extra(n uint, base int) (int, error) {
	if err := d.br.need(n); err != nil {
		return 0, err
	}
	return base + int(d.br.take(n)), nil
}

func (d *inflater) huffmanBlock(b *Block) error {
	d.report(b)
	for {
		sym, err := d.lit.decode(&d.br)
		if err != nil {
			return err
		}
		switch {
		case sym < 256:
			if d.v.Token != nil {
				d.v.Token(Token{Off: int64(len(d.out)), Kind: Literal, Len: 1})
			}
			d.out = append(d.out, byte(sym))
			continue
		case sym == 256:
			return nil
		case sym > 285:
			return fmt.Errorf("invalid length symbol %d", sym)
		}
		sym -= 257
		length, err := d.extra(uint(lenExtra[sym]), int(lenBase[sym]))
		if err != nil {
			return err
		}
		dsym, err := d.dist.decode(&d.br)
		if err != nil {
			return err
		}
		if dsym >= 30 {
			return fmt.Errorf("invalid distance symbol %d", dsym)
		}
		dist, err := d.extra(uint(distExtra[dsym]), int(distBase[dsym]))
		if err != nil {
			return err
		}
		if dist > len(d.out)-d.start {
			return fmt.Errorf("distance %d before the start of the stream", dist)
		}
		if d.v.Token != nil {
			d.v.Token(Token{Off: int64(len(d.out)), Kind: Match, Len: length, Dist: dist})
		}
		from := len(d.out) - dist
		if dist >= length {
			d.out = append(d.out, d.out[from:from+length]...)
			continue
		}
		// Overlapping copy: each byte may be one this match just wrote.
		for i := range length {
			d.out = append(d.out, d.out[from+i])
		}
	}
}

// huffman decodes one canonical Huffman code through a table indexed by
// the next maxLen bits of the stream (low bit first, as codes arrive
// reversed). An entry is sym<<4 | code length; 0 marks bit patterns no
// code starts with (an incomplete code).
type huffman struct {
	table  []uint16
	maxLen uint
}

func (h *huffman) init(lens []uint8) error {
	var count [maxCodeLen + 1]int
	h.maxLen = 0
	for _, l := range lens {
		count[l]++
		h.maxLen = max(h.maxLen, uint(l))
	}
	count[0] = 0
	// Reject over-subscribed codes: more codes of some length than the
	// shorter ones leave room for.
	left := 1
	for l := 1; l <= maxCodeLen; l++ {
		left = left<<1 - count[l]
		if left < 0 {
			return fmt.Errorf("over-subscribed code at length %d", l)
		}
	}
	var next [maxCodeLen + 2]int
	for l := 1; l <= maxCodeLen; l++ {
		next[l+1] = (next[l] + count[l]) << 1
	}
	size := 1 << h.maxLen
	if cap(h.table) < size {
		h.table = make([]uint16, size)
	}
	h.table = h.table[:size]
	clear(h.table)
	for sym, l := range lens {
		if l == 0 {
			continue
		}
		code := next[l]
		next[l]++
		rev := reverse(code, uint(l))
		for i := rev; i < size; i += 1 << l {
			h.table[i] = uint16(sym)<<4 | uint16(l)
		}
	}
	return nil
}

func reverse(code int, n uint) int {
	r := 0
	for range n {
		r = r<<1 | code&1
		code >>= 1
	}
	return r
}

func (h *huffman) decode(br *bitReader) (int, error) {
	if h.maxLen == 0 {
		return 0, errors.New("symbol from an empty code")
	}
	br.fill(h.maxLen)
	e := h.table[br.bits&(1<<h.maxLen-1)]
	l := uint(e & 15)
	if l == 0 {
		return 0, errors.New("bit pattern outside an incomplete code")
	}
	if l > br.n {
		return 0, errUnexpectedEnd
	}
	br.bits >>= l
	br.n -= l
	return int(e >> 4), nil
}

var errUnexpectedEnd = errors.New("stream ends early")

// bitReader reads src low bit first, as DEFLATE packs it.
type bitReader struct {
	src  []byte
	pos  int    // next byte of src to load
	bits uint64 // loaded bits, next one lowest
	n    uint   // how many are loaded
}

func (br *bitReader) bitPos() int64 { return int64(br.pos)*8 - int64(br.n) }

// fill loads bytes until n bits are available or src is exhausted; a
// Huffman decode may then look at zero bits past the end, and checks
// against br.n that the code it found is really there.
func (br *bitReader) fill(n uint) {
	for br.n < n && br.pos < len(br.src) {
		br.bits |= uint64(br.src[br.pos]) << br.n
		br.pos++
		br.n += 8
	}
}

// need makes n (<= 56) bits available, or fails at the end of src.
func (br *bitReader) need(n uint) error {
	br.fill(n)
	if br.n < n {
		return errUnexpectedEnd
	}
	return nil
}

func (br *bitReader) take(n uint) uint32 {
	v := uint32(br.bits & (1<<n - 1))
	br.bits >>= n
	br.n -= n
	return v
}

func (br *bitReader) alignToByte() { br.take(br.n % 8) }

// bytes returns the next n bytes; the reader must be byte-aligned.
func (br *bitReader) bytes(n int) ([]byte, error) {
	// Give back whole bytes still loaded.
	br.pos -= int(br.n / 8)
	br.bits, br.n = 0, 0
	if br.pos+n > len(br.src) {
		return nil, errUnexpectedEnd
	}
	b := br.src[br.pos : br.pos+n]
	br.pos += n
	return b, nil
}
