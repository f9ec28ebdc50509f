package deflate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
)

// ErrCorrupt means the input is not a valid DEFLATE stream (a truncated
// one also wraps io.ErrUnexpectedEOF).
var ErrCorrupt = errors.New("deflate: corrupt stream")

// errShort is the input running out; Next reports it as ErrCorrupt and
// io.ErrUnexpectedEOF.
var errShort = errors.New("stream ends early")

// BlockType is a block's BTYPE (RFC 1951 3.2.3).
type BlockType uint8

// The block types.
const (
	BlockStored  BlockType = 0
	BlockFixed   BlockType = 1
	BlockDynamic BlockType = 2
)

func (t BlockType) String() string {
	switch t {
	case BlockStored:
		return "stored"
	case BlockFixed:
		return "fixed"
	case BlockDynamic:
		return "dynamic"
	}
	return fmt.Sprintf("BlockType(%d)", uint8(t))
}

// Block is one decoded block: what a BlockWriter needs to write it again
// and what a caller needs to tell whether that would give the same bits.
// Its slices belong to the Decoder and are valid until its next Next.
type Block struct {
	Type  BlockType
	Final bool
	// In is the number of output bytes before the block; Size is how
	// many it inflates to.
	In   int64
	Size int
	// Bit is the stream bit at which the block's 3-bit header starts;
	// EndBit is the one after its last bit (its end-of-block code, or its
	// last stored byte).
	Bit, EndBit int64
	// HeaderBits is what the block spends before its first symbol or
	// stored byte: the 3-bit header, a dynamic block's code lengths, a
	// stored block's padding and LEN/NLEN.
	HeaderBits int
	// LitLens and DistLens are a dynamic block's literal/length and
	// distance code lengths, HLIT+257 and HDIST+1 of them; CodeLens are
	// its code-length code's lengths by symbol, NumCodeLens = HCLEN+4 of
	// which were sent.
	LitLens, DistLens []uint8
	CodeLens          [codegenCodeCount]uint8
	NumCodeLens       int
	// Tokens are a fixed or dynamic block's symbols, end-of-block
	// excluded (none after SkipTokens).
	Tokens []Token
	// Stored is a stored block's bytes (a slice of the Decoder's input).
	Stored []byte
}

// Decoder inflates a raw DEFLATE stream held in memory one block at a
// time, reporting each block's structure and tokens as well as its bytes:
// the restore path needs the tokens to Huffman-encode them again (see
// BlockWriter) and the bytes to go on.
//
// Design. Bits are read low bit first from a 64-bit buffer. While at
// least 8 input bytes remain, a block's symbols are decoded by a fast loop
// that refills the buffer with one unaligned 64-bit load per match (a
// token needs at most 48 bits) or per run of up to three literals, and
// checks nothing about input length; within the last bytes a careful path
// reads a byte at a time and decodes a code from whatever bits remain,
// zero-padded, failing only if the code found is longer. Huffman codes
// are decoded through a 2^10-entry primary table with second-level tables
// for longer codes, rebuilt per block into buffers the Decoder keeps, so
// that steady-state decoding allocates nothing; a dynamic header's code
// lengths are read with the fast loop's loads too, as a small file's parse
// frame is a header per few KiB. (Entries holding two literals at once
// were tried: with three literals a load they no longer paid for the pass
// over the table that makes them, on Go sources or small files alike.)
// Codes are accepted or refused as compress/flate does (Walk's fuzz target
// holds the two to that).
type Decoder struct {
	src  []byte
	p    int    // next byte of src to load
	bits uint64 // loaded bits, next one lowest
	nb   uint   // how many are loaded
	base int64  // stream bytes before src[0] (a fed stream drops them)
	out  int64  // bytes inflated so far
	done bool   // the final block has been decoded
	err  error  // sticky

	blk       Block
	toks      []Token // this block's tokens; with accum, every block's so far
	accum     bool
	marks     []Mark // with accum, where each block's tokens start
	markBase  int64  // out at AppendTokens
	lens      [maxNumLit + offsetCodeCount]uint8
	lit, dist huffTable // a dynamic block's codes
	clen      huffTable

	// For Walk and stream decoders: feed returns more input once src is used up (io.EOF at
	// the end); count keeps neither bytes nor tokens, only their number;
	// noTokens keeps the bytes only (SkipTokens).
	feed     func() ([]byte, error)
	count    bool
	noTokens bool
}

// NewDecoder returns a Decoder for the stream starting at src[0].
func NewDecoder(src []byte) *Decoder {
	d := &Decoder{}
	d.Reset(src)
	return d
}

// NewStreamDecoder returns a Decoder for the stream r holds from its
// current position, read in chunks of up to len(buf) bytes into buf: a
// stream too large to hold whole. A stored block's Block.Stored is then a
// slice of dst, not of the input.
func NewStreamDecoder(r io.Reader, buf []byte) *Decoder {
	d := &Decoder{}
	d.Reset(nil)
	d.feed = func() ([]byte, error) {
		n, err := r.Read(buf)
		if n > 0 {
			return buf[:n], nil
		}
		if err == nil {
			err = io.ErrNoProgress
		}
		return nil, err
	}
	return d
}

// Reset makes d decode the stream starting at src[0], keeping its buffers.
func (d *Decoder) Reset(src []byte) {
	d.src, d.p, d.bits, d.nb, d.base = src, 0, 0, 0, 0
	d.out, d.done, d.err = 0, false, nil
	d.feed, d.count, d.noTokens = nil, false, false
	if d.accum {
		d.toks, d.marks = nil, nil // the caller's now
	}
	d.toks, d.accum = d.toks[:0], false
}

// SkipTokens makes d keep only the bytes: Block.Tokens stay empty. A
// caller that only wants the output (a parse frame no rebuild follows)
// saves a store per token.
func (d *Decoder) SkipTokens() { d.noTokens = true }

// AppendTokens makes d append every block's tokens to toks, which it then
// owns, instead of keeping each block's in a buffer of its own: a caller
// collecting a whole stream's tokens (a parse) saves copying each one
// again and growing its slice. Block.Tokens is then the block's part of
// it; Tokens returns them all, Marks where each block's start, and a
// later AppendTokens starts anew.
func (d *Decoder) AppendTokens(toks []Token) {
	d.toks, d.accum = toks, true
	d.marks, d.markBase = nil, d.out
}

// Tokens returns the tokens decoded since AppendTokens.
func (d *Decoder) Tokens() []Token { return d.toks }

// Mark is where a block starts in the tokens of a stream (or of a part of
// one): its first token's index and that token's input offset. Blocks
// hold up to 16K tokens, so a reader looking for the token at an offset
// walks at most a block's worth from the mark before it.
type Mark struct {
	Token int
	In    int64
}

// Marks returns where each block with tokens decoded since AppendTokens
// starts in Tokens, its offset counted from the first byte decoded since.
func (d *Decoder) Marks() []Mark { return d.marks }

// ResetAt makes d decode a stream from a block boundary inside it: src
// holds the stream from the byte with the boundary's bit, skip (0–7) is
// that bit's place in the byte, and out is the boundary's output offset.
// The dst of each Next must end with the output before the boundary (its
// last 32 KiB), which matches may copy from; Bits counts from src[0].
func (d *Decoder) ResetAt(src []byte, skip uint, out int64) error {
	d.Reset(src)
	d.out = out
	if skip > 7 {
		return fmt.Errorf("deflate: skip %d bits", skip)
	}
	if _, err := d.take(skip); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, io.ErrUnexpectedEOF)
	}
	return nil
}

// DecodeAll inflates the whole stream d was reset to, appending its bytes
// to dst, and calls each, when set, with every block as it is decoded
// (valid until each returns).
func (d *Decoder) DecodeAll(dst []byte, each func(*Block) error) ([]byte, error) {
	for {
		b, out, err := d.Next(dst)
		dst = out
		if errors.Is(err, io.EOF) {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
		if each != nil {
			if err := each(b); err != nil {
				return dst, err
			}
		}
	}
}

// Bits is the number of stream bits decoded so far; after the final block
// the stream ends in byte (Bits()+7)/8.
func (d *Decoder) Bits() int64 { return 8*(d.base+int64(d.p)) - int64(d.nb) }

// Out is the number of bytes inflated so far.
func (d *Decoder) Out() int64 { return d.out }

// Next decodes the next block, appends its bytes to dst and returns the
// block and the extended dst. dst must end with the stream's output so
// far (at least its last 32 KiB), which its matches copy from. After the
// final block Next returns io.EOF. Errors are sticky; a corrupt or
// truncated stream's wrap ErrCorrupt.
func (d *Decoder) Next(dst []byte) (*Block, []byte, error) {
	if d.err != nil {
		return nil, dst, d.err
	}
	if d.done {
		return nil, dst, io.EOF
	}
	b, dst, err := d.block(dst)
	if err != nil {
		if errors.Is(err, errShort) {
			err = fmt.Errorf("%w at bit %d: %w", ErrCorrupt, d.Bits(), io.ErrUnexpectedEOF)
		}
		d.err = err
		return nil, dst, err
	}
	return b, dst, nil
}

func (d *Decoder) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w at bit %d: %s", ErrCorrupt, d.Bits(), fmt.Sprintf(format, args...))
}

func (d *Decoder) block(dst []byte) (*Block, []byte, error) {
	b := &d.blk
	if !d.accum {
		d.toks = d.toks[:0]
	}
	first := len(d.toks)
	*b = Block{Bit: d.Bits(), In: d.out}
	hdr, err := d.take(3)
	if err != nil {
		return nil, dst, err
	}
	b.Final = hdr&1 == 1
	b.Type = BlockType(hdr >> 1)
	n0 := len(dst)
	switch b.Type {
	case BlockStored:
		dst, err = d.stored(b, dst)
	case BlockFixed:
		b.HeaderBits = 3
		dst, err = d.codes(b, dst, &fixedLitTable, &fixedDistTable)
	case BlockDynamic:
		if err = d.dynamicHeader(b); err == nil {
			b.HeaderBits = int(d.Bits() - b.Bit)
			dst, err = d.codes(b, dst, &d.lit, &d.dist)
		}
	default:
		err = d.corrupt("reserved block type")
	}
	if err != nil {
		d.toks = d.toks[:first]
		return nil, dst[:n0], err
	}
	if !d.count {
		b.Size = len(dst) - n0
	}
	d.out += int64(b.Size)
	b.EndBit = d.Bits()
	b.Tokens = d.toks[first:len(d.toks):len(d.toks)]
	if d.accum && len(b.Tokens) > 0 {
		d.marks = append(d.marks, Mark{Token: first, In: b.In - d.markBase})
	}
	d.done = b.Final
	return b, dst, nil
}

// fill loads bits until n are available, or fails at the end of the input
// (where the bits past it read as zeros).
func (d *Decoder) fill(n uint) error {
	for d.nb < n {
		if d.p == len(d.src) {
			if d.feed == nil {
				return errShort
			}
			b, err := d.feed()
			if err != nil {
				if errors.Is(err, io.EOF) {
					return errShort
				}
				return err
			}
			d.base += int64(len(d.src))
			d.src, d.p = b, 0
			continue
		}
		d.bits |= uint64(d.src[d.p]) << d.nb
		d.p++
		d.nb += 8
	}
	return nil
}

// take reads n (<= 32) bits.
func (d *Decoder) take(n uint) (uint32, error) {
	if err := d.fill(n); err != nil {
		return 0, err
	}
	v := uint32(d.bits & (1<<n - 1))
	d.bits >>= n
	d.nb -= n
	return v, nil
}

// sym decodes one symbol of h, a plainCode, a byte at a time.
func (d *Decoder) sym(h *huffTable) (int, error) {
	e, err := d.entry(h)
	return int(e >> entrySymShift), err
}

// entry decodes the entry of one symbol of h, a byte at a time.
func (d *Decoder) entry(h *huffTable) (uint32, error) {
	if h.maxLen == 0 {
		return 0, d.corrupt("symbol of an empty code")
	}
	// Near the end fewer than maxLen bits may remain: decode from what
	// there is and fail if the code is longer.
	if err := d.fill(h.maxLen); err != nil && !errors.Is(err, errShort) {
		return 0, err
	}
	e := h.lookup(d.bits)
	l := uint(e & entryLenMask)
	if l == 0 {
		return 0, d.corrupt("invalid code")
	}
	if l > d.nb {
		return 0, errShort
	}
	d.bits >>= l
	d.nb -= l
	return e, nil
}

func (d *Decoder) stored(b *Block, dst []byte) ([]byte, error) {
	d.bits >>= d.nb % 8
	d.nb -= d.nb % 8
	v, err := d.take(32)
	if err != nil {
		return dst, err
	}
	n := int(v & 0xffff)
	if uint16(n) != ^uint16(v>>16) {
		return dst, d.corrupt("stored block length")
	}
	b.HeaderBits = int(d.Bits() - b.Bit)
	if d.count {
		// Skip the bytes, across fed chunks.
		k := min(n, int(d.nb/8))
		d.bits >>= 8 * k
		d.nb -= 8 * uint(k)
		if k < n {
			// The buffer is empty; clear what a 64-bit load put past
			// its bits, which the skip makes stale.
			d.bits = 0
		}
		for rest := n - k; rest > 0; {
			if d.p == len(d.src) {
				if err := d.fill(8); err != nil {
					return dst, err
				}
				d.bits, d.nb = 0, 0
				rest--
				continue
			}
			k := min(rest, len(d.src)-d.p)
			d.p += k
			rest -= k
		}
		b.Size = n
		return dst, nil
	}
	if d.feed != nil {
		// The bytes may span fed chunks, and the loaded ones may come
		// from a chunk gone: take them a byte at a time (parse frames,
		// the fed streams, hold no stored blocks but their last, empty).
		n0 := len(dst)
		for range n {
			v, err := d.take(8)
			if err != nil {
				return dst[:n0], err
			}
			dst = append(dst, byte(v))
		}
		b.Stored = dst[n0:]
		return dst, nil
	}
	// Give back the whole bytes loaded: the rest is aligned in src.
	d.p -= int(d.nb / 8)
	d.bits, d.nb = 0, 0
	if n > len(d.src)-d.p {
		d.p = len(d.src)
		return dst, errShort
	}
	b.Stored = d.src[d.p : d.p+n]
	d.p += n
	return append(dst, b.Stored...), nil
}

func (d *Decoder) dynamicHeader(b *Block) error {
	v, err := d.take(14)
	if err != nil {
		return err
	}
	nlit, ndist, nclen := int(v&31)+257, int(v>>5&31)+1, int(v>>10)+4
	if nlit > maxNumLit || ndist > offsetCodeCount {
		return d.corrupt("%d literal/length and %d distance codes", nlit, ndist)
	}
	b.NumCodeLens = nclen
	for i := range nclen {
		c, err := d.take(3)
		if err != nil {
			return err
		}
		b.CodeLens[codegenOrder[i]] = uint8(c)
	}
	if !d.clen.build(b.CodeLens[:], plainCode) {
		return d.corrupt("code length codes")
	}
	lens := d.lens[:nlit+ndist]
	for i := 0; i < len(lens); {
		// While 8 bytes remain, one load per length (a code of at most 7
		// bits and at most 7 extra bits) and no input checks, as in
		// codes: small files' parse frames are a header per few KiB.
		var sym int
		fast := d.p+8 <= len(d.src)
		if fast {
			d.bits |= binary.LittleEndian.Uint64(d.src[d.p:]) << d.nb
			d.p += int(63-d.nb) >> 3
			d.nb |= 56
			e := d.clen.lookup(d.bits)
			l := uint(e & entryLenMask)
			if l == 0 {
				return d.corrupt("invalid code length code")
			}
			d.bits >>= l
			d.nb -= l
			sym = int(e >> entrySymShift)
		} else if sym, err = d.sym(&d.clen); err != nil {
			return err
		}
		if sym < 16 {
			lens[i] = uint8(sym)
			i++
			continue
		}
		var rep int
		var val uint8
		extra, add := uint(7), 11
		switch sym {
		case 16:
			if i == 0 {
				return d.corrupt("repeat with no previous length")
			}
			extra, add, val = 2, 3, lens[i-1]
		case 17:
			extra, add = 3, 3
		}
		if fast {
			rep = add + int(d.bits&(1<<extra-1))
			d.bits >>= extra
			d.nb -= extra
		} else {
			x, err := d.take(extra)
			if err != nil {
				return err
			}
			rep = add + int(x)
		}
		if i+rep > len(lens) {
			return d.corrupt("code lengths overrun")
		}
		for ; rep > 0; rep-- {
			lens[i] = val
			i++
		}
	}
	b.LitLens, b.DistLens = lens[:nlit:nlit], lens[nlit:]
	if b.LitLens[endBlockMarker] == 0 {
		return d.corrupt("no end-of-block code")
	}
	if !d.lit.build(b.LitLens, litLenCode) {
		return d.corrupt("literal/length codes")
	}
	// A distance code may be empty or a lone code (RFC 1951 3.2.7).
	if !d.dist.build(b.DistLens, distCode) {
		return d.corrupt("distance codes")
	}
	return nil
}

// Length and distance symbols decoded: base value and extra bits.
var (
	lenBase  [29]uint16
	lenExtra [29]uint8
	// Distance symbols 30 and 31 (fixed code only) are invalid.
	distBase  [32]uint32
	distExtra [32]uint8
)

func init() {
	for i := range lenBase {
		lenBase[i] = uint16(lengthBase[i] + baseMatchLength)
		lenExtra[i] = uint8(lengthExtraBits[i])
	}
	for i := range offsetCodeCount {
		distBase[i] = offsetBase[i] + baseMatchOffset
		distExtra[i] = uint8(offsetExtraBits[i])
	}
}

// maxTokenBits is the most bits one token takes: a 15-bit length code, 5
// extra bits, a 15-bit distance code, 13 extra bits.
const maxTokenBits = 48

// DstSlack is the room past a stream's last byte a caller sizing dst for
// the whole output leaves in its capacity, so that Next need not grow it.
const DstSlack = outSlack

// outSlack is the room codes keeps in dst beyond a token's bytes, so that
// short matches copy 8 bytes at a time.
const outSlack = maxMatchLength + 8

// codes decodes a fixed or dynamic block's symbols to its end-of-block
// code, appending bytes to dst and tokens to d.toks.
func (d *Decoder) codes(b *Block, dst []byte, lit, dist *huffTable) ([]byte, error) {
	keep := !d.count
	toksToo := keep && !d.noTokens
	var out []byte
	var o, lo int // next output index, first index matches may reach
	if keep {
		out = dst[:cap(dst)]
		o = len(dst)
		lo = o - int(min(d.out, int64(o)))
	} else {
		o = int(d.out)
	}
	start := o
	toks := d.toks
	var err error
	for {
		// Fast path: while 8 bytes remain, one load per token and no
		// input checks. A load (56 bits or more) holds up to three
		// literal codes (15 bits at most each): they are taken from it
		// in a row, and the entry that ends the row, looked up already,
		// is kept (next) for after the next load, which leaves the bits
		// it was looked up from as they are.
		src, p, bits, nb := d.src, d.p, d.bits, d.nb
		var bad string // why the fast path stopped on a bad symbol
		eob := false
		var next uint32 // an entry looked up from bits, or 0
		for p+8 <= len(src) {
			if keep && len(out)-o < outSlack {
				out = grow(out, o)
			}
			bits |= binary.LittleEndian.Uint64(src[p:]) << nb
			p += int(63-nb) >> 3
			nb |= 56
			e := next
			if e == 0 {
				e = lit.lookup(bits)
			}
			next = 0
			if e&entryBase == 0 && e>>entrySymShift < 256 && e&entryLenMask != 0 {
				for k := 0; ; k++ {
					l := uint(e & entryLenMask)
					bits >>= l
					nb -= l
					if keep {
						out[o] = byte(e >> entrySymShift)
						if toksToo {
							toks = append(toks, Token(e>>entrySymShift))
						}
					}
					o++
					if k == 2 {
						break
					}
					e = lit.lookup(bits)
					if e&entryBase != 0 || e>>entrySymShift >= 256 || e&entryLenMask == 0 {
						next = e
						break
					}
				}
				continue
			}
			l := uint(e & entryLenMask)
			if l == 0 {
				bad = "invalid literal/length code"
				break
			}
			bits >>= l
			nb -= l
			v := int(e >> entrySymShift)
			if e&entryBase == 0 {
				if v == endBlockMarker {
					eob = true
					break
				}
				bad = "length code 286 or 287"
				break
			}
			n := uint(e>>4) & 15
			length := v + int(bits&(1<<n-1))
			bits >>= n
			nb -= n
			e = dist.lookup(bits)
			l = uint(e & entryLenMask)
			if l == 0 || e&entryBase == 0 {
				bad = "invalid distance code"
				break
			}
			bits >>= l
			nb -= l
			n = uint(e>>4) & 15
			dd := int(e>>entrySymShift) + int(bits&(1<<n-1))
			bits >>= n
			nb -= n
			if dd > o-lo {
				d.bits, d.nb, d.p = bits, nb, p
				err = d.farMatch(dd, o-start)
				break
			}
			if keep {
				copyMatch(out, o, dd, length)
				if toksToo {
					toks = append(toks, MatchToken(length, dd))
				}
			}
			o += length
		}
		d.bits, d.nb, d.p = bits, nb, p
		if bad != "" {
			err = d.corrupt("%s", bad)
		}
		if eob || err != nil {
			break
		}
		if keep && len(out)-o < outSlack {
			out = grow(out, o)
		}
		// Careful path, near the end of the input.
		e, err2 := d.entry(lit)
		if err2 != nil {
			err = err2
			break
		}
		v := int(e >> entrySymShift)
		if e&entryBase == 0 {
			if v < 256 {
				if keep {
					out[o] = byte(v)
					if toksToo {
						toks = append(toks, Token(v))
					}
				}
				o++
				continue
			}
			if v != endBlockMarker {
				err = d.corrupt("length code %d", v)
			}
			break
		}
		x, err2 := d.take(uint(e>>4) & 15)
		if err2 != nil {
			err = err2
			break
		}
		length := v + int(x)
		e, err2 = d.entry(dist)
		if err2 != nil {
			err = err2
			break
		}
		if e&entryBase == 0 {
			err = d.corrupt("distance code %d", e>>entrySymShift)
			break
		}
		x, err2 = d.take(uint(e>>4) & 15)
		if err2 != nil {
			err = err2
			break
		}
		dd := int(e>>entrySymShift) + int(x)
		if dd > o-lo {
			err = d.farMatch(dd, o-start)
			break
		}
		if keep {
			copyMatch(out, o, dd, length)
			if toksToo {
				toks = append(toks, MatchToken(length, dd))
			}
		}
		o += length
	}
	d.toks = toks
	if !keep {
		b.Size = o - start
		return dst, err
	}
	return out[:o], err
}

// farMatch is the error for a match reaching back past what it may.
func (d *Decoder) farMatch(dist, inBlock int) error {
	if int64(dist) > d.out+int64(inBlock) {
		return d.corrupt("distance %d at output byte %d", dist, d.out+int64(inBlock))
	}
	return fmt.Errorf("deflate: distance %d at output byte %d reaches before dst's history", dist, d.out+int64(inBlock))
}

// grow makes room for outSlack more bytes after out[:o].
func grow(out []byte, o int) []byte {
	n := slices.Grow(out[:o], max(outSlack, o))
	return n[:cap(n)]
}

// copyMatch copies length bytes from dist back to out[o:]; out has
// outSlack bytes of room past o.
func copyMatch(out []byte, o, dist, length int) {
	from := o - dist
	if dist >= 8 {
		if length > 32 && dist >= length {
			copy(out[o:o+length], out[from:from+length])
			return
		}
		// 8 bytes at a time, each read from bytes already written; the
		// last store may spill into the slack.
		for i := 0; i < length; i += 8 {
			binary.LittleEndian.PutUint64(out[o+i:], binary.LittleEndian.Uint64(out[from+i:]))
		}
		return
	}
	// Overlapping: each byte may be one this match just wrote.
	for i := range length {
		out[o+i] = out[from+i]
	}
}

// Huffman decoding tables. An entry is value<<16 | code length, or, in the
// primary table for codes longer than primaryBits, off<<16 | entryLink |
// subBits<<4 pointing at a second-level table of 2^subBits entries
// indexed by the code's bits after the first primaryBits. 0 marks a bit
// pattern no code starts with. The value is the symbol, except for the
// length symbols of a literal/length code and the symbols of a distance
// code (entryBase): there it is the base the symbol stands for, and
// extra<<4 says how many extra bits follow, so that decoding a match reads
// no other table.
const (
	primaryBits   = 10
	primarySize   = 1 << primaryBits
	entryLenMask  = 15
	entryLink     = 1 << 8
	entryBase     = 1 << 9
	entrySymShift = 16
	// A complete code of n symbols has at most n second-level tables,
	// each of at most 2^(15-primaryBits) entries.
	maxTableSize = primarySize + (maxNumLit+2)<<(15-primaryBits)
)

type huffTable struct {
	maxLen uint // longest code; 0 for an empty code
	t      []uint32
}

// What a table's symbols stand for (see entryBase).
type tableKind uint8

const (
	plainCode  tableKind = iota // symbols only: the code length code
	litLenCode                  // lengths carry their base
	distCode                    // distances carry their base; 30 and 31 do not
)

// symEntry is the entry value and flags of symbol sym of a code of kind k.
func (k tableKind) symEntry(sym int) uint32 {
	switch {
	case k == litLenCode && sym > endBlockMarker && sym <= 285:
		i := sym - lengthCodesStart
		return uint32(lenBase[i])<<entrySymShift | entryBase | uint32(lenExtra[i])<<4
	case k == distCode && sym < offsetCodeCount:
		return distBase[sym]<<entrySymShift | entryBase | uint32(distExtra[sym])<<4
	}
	return uint32(sym) << entrySymShift
}

func (h *huffTable) lookup(bits uint64) uint32 {
	e := h.t[bits&(primarySize-1)]
	if e&entryLink != 0 {
		sub := uint(e>>4) & 15
		e = h.t[int(e>>entrySymShift)+int(bits>>primaryBits)&(1<<sub-1)]
	}
	return e
}

// Fixed codes (RFC 1951 3.2.6), built once.
var (
	fixedLitTable, fixedDistTable huffTable
	fixedLitLens                  [288]uint8
	fixedDistLens                 [32]uint8
)

func init() {
	l := &fixedLitLens
	for i := range l {
		switch {
		case i < 144:
			l[i] = 8
		case i < 256:
			l[i] = 9
		case i < 280:
			l[i] = 7
		default:
			l[i] = 8 // 286 and 287 take part in the code, though invalid
		}
	}
	fixedLitTable.build(l[:], litLenCode)
	// Distances 30 and 31 exist in the code and fail at decode.
	d := &fixedDistLens
	for i := range d {
		d[i] = 5
	}
	fixedDistTable.build(d[:], distCode)
}

// build makes the table for code lengths lens; false for a code that is
// over-subscribed or incomplete, as compress/flate (and zlib) judge: only
// an empty code (which fails at decode) and a lone one-bit code may leave
// bit patterns unused.
func (h *huffTable) build(lens []uint8, kind tableKind) bool {
	var count [16]int
	maxLen := uint(0)
	for _, l := range lens {
		count[l&15]++
		maxLen = max(maxLen, uint(l))
	}
	h.maxLen = 0
	if maxLen > 15 {
		return false
	}
	count[0] = 0
	left := 1
	for l := 1; l < 16; l++ {
		left = left<<1 - count[l]
		if left < 0 {
			return false
		}
	}
	if left != 0 && maxLen != 0 && !(maxLen == 1 && count[1] == 1) {
		return false
	}
	if cap(h.t) < maxTableSize {
		h.t = make([]uint32, maxTableSize)
	}
	h.t = h.t[:primarySize]
	// A complete code writes every entry below (each bit pattern starts
	// exactly one code); only an incomplete one leaves patterns to mark.
	complete := left == 0
	if !complete {
		clear(h.t)
	}
	h.maxLen = maxLen
	var next [16]int
	code := 0
	for l := 1; l < 16; l++ {
		code = (code + count[l-1]) << 1
		next[l] = code
	}
	if maxLen > primaryBits {
		// Size the second-level tables: each spans the longest code
		// sharing its first primaryBits bits.
		var need [primarySize]uint8
		nx := next
		for _, l := range lens {
			if l <= primaryBits {
				if l > 0 {
					nx[l]++
				}
				continue
			}
			rev := reverseCode(nx[l], uint(l))
			nx[l]++
			need[rev&(primarySize-1)] = max(need[rev&(primarySize-1)], l-primaryBits)
		}
		off := primarySize
		for i, n := range need {
			if n > 0 {
				h.t[i] = uint32(off)<<entrySymShift | entryLink | uint32(n)<<4
				off += 1 << n
			}
		}
		h.t = h.t[:off]
		if !complete {
			clear(h.t[primarySize:])
		}
	}
	for sym, l := range lens {
		if l == 0 {
			continue
		}
		rev := reverseCode(next[l], uint(l))
		next[l]++
		e := kind.symEntry(sym) | uint32(l)
		if l <= primaryBits {
			for i := rev; i < primarySize; i += 1 << l {
				h.t[i] = e
			}
			continue
		}
		link := h.t[rev&(primarySize-1)]
		sub := int(link>>4) & 15
		base := int(link >> entrySymShift)
		for i := rev >> primaryBits; i < 1<<sub; i += 1 << (int(l) - primaryBits) {
			h.t[base+i] = e
		}
	}
	return true
}

// reverseCode is code's n low bits in stream order.
func reverseCode(code int, n uint) int {
	return int(bits.Reverse16(uint16(code)) >> (16 - n))
}
