package deflate

import (
	"errors"
	"fmt"
	"io"
)

// Walk reads one raw DEFLATE stream from r and reports, without writing
// its output, how many bytes it inflates to (size), how many bits it
// spans (bits; the stream ends in byte ceil(bits/8)), and, through
// onBlock, where each block but the last ends. r is read a byte at a
// time, up to two bytes past the one holding the stream's last bit.
//
// The boundaries are those the encoder reported when it wrote the stream
// (Writer.OnBlock), so a recipe learns its restart points from the blob
// itself, before compressing anything. Boundary.Win is what levels 2–9
// had (see winAt); a boundary whose window index cannot be known from its
// offset alone is reported with Win -1.
func Walk(r io.ByteReader, onBlock func(Boundary)) (size, bits int64, err error) {
	w := &walker{r: r}
	for {
		final, err := w.block()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, fmt.Errorf("deflate: %w", err)
		}
		if final {
			return w.out, w.bitsRead(), nil
		}
		if onBlock != nil {
			onBlock(Boundary{In: w.out, Bit: w.bitsRead(), Win: winAt(w.out)})
		}
	}
}

// winAt is the window index levels 2–9 had at a block boundary at input
// offset in, away from the end of the stream. The window slides by 32 KiB
// when the matcher stops, window full, at the first position it visits at
// or past index 65275; it visits every position but those inside a match,
// so the k-th slide happens at most 258 bytes after offset 32768(k-1)+65275.
// Offsets in or near that span (and a block written as stored, whose
// tokens are unknown, may end there) get -1.
func winAt(in int64) int32 {
	const (
		first  = 2*windowSize - (minMatchLength + maxMatchLength) + 1 // 65275
		margin = maxMatchLength + 64
	)
	// Slide j (from 1) has its threshold at first + (j-1)·32768; j slides
	// have thresholds at or before in.
	j := int64(0)
	if in >= first {
		j = (in-first)/windowSize + 1
	}
	if next := first + j*windowSize; next-in <= margin {
		return -1
	}
	if last := first + (j-1)*windowSize; j > 0 && in-last <= margin {
		return -1
	}
	return int32(in - j*windowSize)
}

// walker decodes the structure of a DEFLATE stream.
type walker struct {
	r    io.ByteReader
	bits uint64 // pending bits, low first
	nb   uint   // how many
	read int64  // bytes read from r
	out  int64  // bytes the stream inflates to so far
	lit  huffTable
	dist huffTable
	lens [maxNumLit + offsetCodeCount]uint8
}

func (w *walker) bitsRead() int64 { return 8*w.read - int64(w.nb) }

// need makes n (<= 32) bits available, or fails at the end of r.
func (w *walker) need(n uint) error {
	for w.nb < n {
		c, err := w.r.ReadByte()
		if err != nil {
			return err
		}
		w.read++
		w.bits |= uint64(c) << w.nb
		w.nb += 8
	}
	return nil
}

func (w *walker) take(n uint) (uint32, error) {
	if err := w.need(n); err != nil {
		return 0, err
	}
	v := uint32(w.bits & (1<<n - 1))
	w.bits >>= n
	w.nb -= n
	return v, nil
}

var errCorrupt = errors.New("corrupt stream")

func (w *walker) block() (final bool, err error) {
	hdr, err := w.take(3)
	if err != nil {
		return false, err
	}
	final = hdr&1 == 1
	switch hdr >> 1 {
	case 0:
		err = w.stored()
	case 1:
		w.fixedTables()
		err = w.codes()
	case 2:
		if err = w.dynamicTables(); err == nil {
			err = w.codes()
		}
	default:
		err = fmt.Errorf("%w: reserved block type", errCorrupt)
	}
	return final, err
}

func (w *walker) stored() error {
	// Skip to the byte boundary.
	w.bits >>= w.nb % 8
	w.nb -= w.nb % 8
	v, err := w.take(32)
	if err != nil {
		return err
	}
	n, nn := v&0xffff, v>>16
	if uint16(n) != ^uint16(nn) {
		return fmt.Errorf("%w: stored block length", errCorrupt)
	}
	for ; n > 0; n-- {
		if _, err := w.take(8); err != nil {
			return err
		}
		w.out++
	}
	return nil
}

func (w *walker) fixedTables() {
	var l [maxNumLit + offsetCodeCount]uint8
	for i := 0; i < 144; i++ {
		l[i] = 8
	}
	for i := 144; i < 256; i++ {
		l[i] = 9
	}
	for i := 256; i < 280; i++ {
		l[i] = 7
	}
	for i := 280; i < 288; i++ {
		l[i] = 8 // 286 and 287 take part in the code, though invalid
	}
	w.lit.build(l[:288])
	// Fixed distances are read as 5 bits: codes 30 and 31 exist and
	// fail at decode.
	var d [32]uint8
	for i := range d {
		d[i] = 5
	}
	w.dist.build(d[:])
}

var codeOrder = [...]int{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

func (w *walker) dynamicTables() error {
	v, err := w.take(14)
	if err != nil {
		return err
	}
	nlit, ndist, nclen := int(v&31)+257, int(v>>5&31)+1, int(v>>10)+4
	if nlit > maxNumLit || ndist > offsetCodeCount {
		return fmt.Errorf("%w: too many codes", errCorrupt)
	}
	var cl [19]uint8
	for i := range nclen {
		c, err := w.take(3)
		if err != nil {
			return err
		}
		cl[codeOrder[i]] = uint8(c)
	}
	var clt huffTable
	if !clt.build(cl[:]) {
		return fmt.Errorf("%w: code length codes", errCorrupt)
	}
	lens := w.lens[:nlit+ndist]
	for i := 0; i < len(lens); {
		sym, err := w.decode(&clt)
		if err != nil {
			return err
		}
		switch {
		case sym < 16:
			lens[i] = uint8(sym)
			i++
			continue
		case sym == 16 && i == 0:
			return fmt.Errorf("%w: repeat with no previous length", errCorrupt)
		}
		var rep int
		var val uint8
		switch sym {
		case 16:
			x, err := w.take(2)
			if err != nil {
				return err
			}
			rep, val = 3+int(x), lens[i-1]
		case 17:
			x, err := w.take(3)
			if err != nil {
				return err
			}
			rep = 3 + int(x)
		default:
			x, err := w.take(7)
			if err != nil {
				return err
			}
			rep = 11 + int(x)
		}
		if i+rep > len(lens) {
			return fmt.Errorf("%w: code lengths overrun", errCorrupt)
		}
		for ; rep > 0; rep-- {
			lens[i] = val
			i++
		}
	}
	if lens[endBlockMarker] == 0 {
		return fmt.Errorf("%w: no end-of-block code", errCorrupt)
	}
	if !w.lit.build(lens[:nlit]) {
		return fmt.Errorf("%w: literal/length codes", errCorrupt)
	}
	// A distance table may be empty or hold one code (RFC 1951 3.2.7).
	if !w.dist.build(lens[nlit:]) {
		return fmt.Errorf("%w: distance codes", errCorrupt)
	}
	return nil
}

// codes walks a compressed block's symbols to its end-of-block code.
func (w *walker) codes() error {
	for {
		sym, err := w.decode(&w.lit)
		if err != nil {
			return err
		}
		switch {
		case sym < 256:
			w.out++
			continue
		case sym == endBlockMarker:
			return nil
		case sym > 285:
			return fmt.Errorf("%w: length code %d", errCorrupt, sym)
		}
		i := sym - lengthCodesStart
		extra, err := w.take(uint(lengthExtraBits[i]))
		if err != nil {
			return err
		}
		n := int64(lengthBase[i]) + int64(extra) + baseMatchLength
		dsym, err := w.decode(&w.dist)
		if err != nil {
			return err
		}
		if dsym >= offsetCodeCount {
			return fmt.Errorf("%w: distance code %d", errCorrupt, dsym)
		}
		dx, err := w.take(uint(offsetExtraBits[dsym]))
		if err != nil {
			return err
		}
		if d := int64(offsetBase[dsym]) + int64(dx) + baseMatchOffset; d > w.out || d > maxMatchOffset {
			return fmt.Errorf("%w: distance %d at %d", errCorrupt, d, w.out)
		}
		w.out += n
	}
}

// huffTable decodes a canonical Huffman code with one lookup of its
// longest code's width: entry = symbol<<4 | length, 0 for no code.
type huffTable struct {
	max   uint
	entry []uint16
}

// build makes the table for code lengths lens; false for a code that
// is over-subscribed or incomplete, as compress/flate (and zlib) judge:
// only an empty code (which fails at decode) and a lone one-bit code
// may leave bit patterns unused.
func (h *huffTable) build(lens []uint8) bool {
	var count [16]int
	h.max = 0
	for _, l := range lens {
		count[l]++
		h.max = max(h.max, uint(l))
	}
	count[0] = 0
	left := 1
	for l := 1; l < 16; l++ {
		left = left<<1 - count[l]
		if left < 0 {
			h.max = 0 // decodes nothing
			return false
		}
	}
	if left != 0 && h.max != 0 && !(h.max == 1 && count[1] == 1) {
		h.max = 0
		return false
	}
	var next [16]int
	code := 0
	for l := 1; l < 16; l++ {
		code = (code + count[l-1]) << 1
		next[l] = code
	}
	size := 1 << h.max
	if cap(h.entry) < size {
		h.entry = make([]uint16, size)
	}
	h.entry = h.entry[:size]
	clear(h.entry)
	for sym, l := range lens {
		if l == 0 {
			continue
		}
		c := next[l]
		next[l]++
		rev := 0
		for b := 0; b < int(l); b++ {
			rev = rev<<1 | (c >> b & 1)
		}
		for i := rev; i < size; i += 1 << l {
			h.entry[i] = uint16(sym)<<4 | uint16(l)
		}
	}
	return true
}

func (w *walker) decode(h *huffTable) (int, error) {
	if h.max == 0 {
		return 0, fmt.Errorf("%w: empty code", errCorrupt)
	}
	// Near the end of the stream fewer than max bits may remain: decode
	// from what there is, padded, and fail if the code is longer.
	if err := w.need(h.max); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	e := h.entry[w.bits&(1<<h.max-1)]
	l := uint(e & 15)
	if l == 0 {
		return 0, fmt.Errorf("%w: invalid code", errCorrupt)
	}
	if l > w.nb {
		return 0, io.ErrUnexpectedEOF
	}
	w.bits >>= l
	w.nb -= l
	return int(e >> 4), nil
}
