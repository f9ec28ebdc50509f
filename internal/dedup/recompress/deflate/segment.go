// Package deflate is the DEFLATE encoder of Go 1.26's compress/flate
// (copied from the toolchain; its licence is in LICENSE) with what
// byte-exact parallel rebuilds need and the standard library does not
// expose: where each block of the stream ends (input offset, output bit
// offset, window position), and compressing one segment of a stream from
// such a boundary, so that segments compress in parallel and join, bit for
// bit, into the stream a single encoder writes. The copy also pins the
// encoder: a recipe naming stdlib-gzip rebuilds the same bytes whatever
// toolchain later builds cairn (deflate_test compares it with the
// toolchain's own).
//
// Restarting from a block boundary, levels 2–9. When a block ends, the
// encoder's state is the window (the input before the boundary, at some
// window index), the hash chains over the last 32 KiB of it, and the lazy
// matcher's pending state. A restart rebuilds the first two: the window
// index is recorded with the boundary, since it decides when the window
// slides and so whether a later block may be stored; every position of the
// last 32 KiB is hashed in order, the last three once the bytes after them
// arrive (compress/flate's preset dictionary never hashes those, which is
// why NewWriterDict cannot restart a stream). The pending state needs
// nothing: a block ends either after a match (nothing pending) or after a
// literal while the match at the next position is pending, and a fresh
// matcher computes that match from the same chains. Levels 4–9 hash every
// position, so the chains are the original's; levels 2–3 skip hashing
// inside long matches, so theirs may differ. Level 1 (BestSpeed) is a
// different encoder whose blocks are 65535 input bytes each: a restart
// encodes the previous block as a warm-up, which matches the original only
// where that block's own history did not matter. None of this is trusted
// on argument: recompress keeps a restart point only after a rebuild from
// it reproduced the original stream.
package deflate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Boundary is where one block of a stream ends and the next begins.
type Boundary struct {
	// In is the number of input bytes before the boundary.
	In int64 `json:"in"`
	// Bit is the number of output bits before the boundary.
	Bit int64 `json:"bit"`
	// Win is the window index of In when the block ended (levels 2–9).
	Win int32 `json:"win,omitempty"`
}

// ErrDiverged means a segment did not end at the boundary it was asked
// to: the restart does not reproduce the original stream.
var ErrDiverged = errors.New("deflate: segment does not end at its boundary")

// errStop ends a segment's compression at its last block.
var errStop = errors.New("deflate: segment complete")

// InternalError reports an error in the encoder.
type InternalError string

func (e InternalError) Error() string { return "deflate: internal error: " + string(e) }

// Restartable reports whether a stream of this level can be compressed in
// segments from block boundaries.
func Restartable(level int) bool {
	return level == BestSpeed || level == DefaultCompression || (level >= 2 && level <= 9)
}

// HistoryLen is how many input bytes before a boundary a segment needs:
// the window for levels 2–9, the previous block for level 1.
func HistoryLen(level int) int {
	if level == BestSpeed {
		return speedWarmUp * maxStoreBlockSize
	}
	return 2 * windowSize
}

// speedWarmUp is how many BestSpeed blocks before a boundary a restart
// encodes to rebuild the encoder's match table. One block leaves it
// different wherever the first block's matches reached further back (on a
// run of zeros, at every boundary); two mostly converge.
const speedWarmUp = 2

// Lookahead is how many input bytes past its last boundary a segment that
// does not end the stream needs: the matcher looks that far ahead before it
// decides the tokens just before the boundary.
const Lookahead = 4 << 10

// OnBlock makes w call f after each block it writes, with the boundary
// at the block's end.
func (w *Writer) OnBlock(f func(Boundary)) { w.d.onBlock = f }

// CompressSegment compresses one segment of a stream at level, starting
// from boundary from, as the stream's single encoder did. hist is the input
// just before from (at least min(from.In, HistoryLen(level)) bytes; more is
// ignored). With to set, in holds the segment's input up to to.In plus
// Lookahead bytes (or up to the stream's end, if nearer), and the segment
// ends with the block that ends at to; with to nil, in is the rest of the
// stream and the segment ends the stream.
//
// The output covers the stream's bits from from.Bit rounded down to a byte
// through the segment's end: the low from.Bit%8 bits of its first byte are
// zero (the previous segment's), and with to set its last byte is partial
// when to.Bit%8 != 0, its unused high bits zero.
func CompressSegment(level int, from Boundary, hist, in []byte, to *Boundary) ([]byte, error) {
	return CompressSegmentFollowing(level, from, hist, in, to, nil)
}

// CompressSegmentFollowing is CompressSegment taking, inside the stretches
// src knows (input offsets of the whole stream, none before from.In), their
// tokens in place of searching, as CompressFollowing does; src nil is
// CompressSegment. Levels 4–9 only follow.
func CompressSegmentFollowing(level int, from Boundary, hist, in []byte, to *Boundary, src TokenSource) ([]byte, error) {
	return CompressSegmentHeaders(level, from, hist, in, to, src, nil)
}

// CompressSegmentHeaders is CompressSegmentFollowing writing each block
// whose input starts at an offset headers holds with that header (see
// header.go) in place of the codes it would derive.
func CompressSegmentHeaders(level int, from Boundary, hist, in []byte, to *Boundary, src TokenSource, headers map[int64]*BlockHeader) ([]byte, error) {
	if src != nil && !Searchable(level) {
		return nil, fmt.Errorf("%w: %d", ErrNotSearchable, level)
	}
	if !Restartable(level) {
		return nil, fmt.Errorf("deflate: level %d cannot restart", level)
	}
	var out bytes.Buffer
	out.Grow(len(in) / 2)
	var d compressor
	if err := d.init(&out, level); err != nil {
		return nil, err
	}
	d.w.nbits = uint(from.Bit & 7)
	d.base = from.In
	if to != nil {
		if to.In <= from.In || to.Bit <= from.Bit {
			return nil, fmt.Errorf("deflate: segment ends before it starts")
		}
		d.stop = to.In
	}
	if n := min(int64(HistoryLen(level)), from.In); int64(len(hist)) < n {
		return nil, fmt.Errorf("deflate: segment at %d needs %d bytes of history, got %d", from.In, n, len(hist))
	} else {
		hist = hist[int64(len(hist))-n:]
	}
	if d.compressionLevel.level == BestSpeed {
		// The previous blocks, as the original split them.
		for len(hist) > 0 {
			k := (len(hist)-1)%maxStoreBlockSize + 1
			d.tokens = d.bestSpeed.encode(d.tokens[:0], hist[:k])
			hist = hist[k:]
		}
		d.tokens = d.tokens[:0]
	} else if err := d.restart(hist, int(from.Win)); err != nil {
		return nil, err
	}
	if src != nil {
		d.follow = &follower{src: src, lastEnd: -1}
		d.follow.next()
	}
	d.headers, d.blockIn = headers, from.In
	_, err := d.write(in)
	switch {
	case to == nil && err == nil:
		if err := d.close(); err != nil {
			return nil, err
		}
		return out.Bytes(), nil
	case to == nil:
		return nil, err
	case err == nil:
		// The input ran out before the last block: the stream's end is
		// near, so the original decided these tokens at its close.
		d.sync = true
		d.step(&d)
		d.sync = false
		if d.err == nil {
			return nil, ErrDiverged
		}
		err = d.err
	}
	if !errors.Is(err, errStop) {
		return nil, err
	}
	if got, want := d.w.bitsWritten(), to.Bit-from.Bit&^7; got != want {
		return nil, fmt.Errorf("%w: %d bits, want %d", ErrDiverged, got, want)
	}
	d.w.writePending()
	if d.w.err != nil {
		return nil, d.w.err
	}
	return out.Bytes(), nil
}

// restart puts the encoder (levels 2–9, fresh) in the state it had at a
// block boundary whose input before it ends with hist and whose window
// index was win. See the package doc.
func (d *compressor) restart(hist []byte, win int) error {
	if win < 0 || win > len(hist) || win > 2*windowSize {
		return fmt.Errorf("deflate: restart at window index %d with %d bytes of history", win, len(hist))
	}
	copy(d.window, hist[len(hist)-win:])
	d.base -= int64(win)
	d.index, d.windowEnd, d.blockStart = win, win, win
	start := max(0, win-windowSize)
	for i := start; i+minMatchLength <= win; i++ {
		d.insertHash(i)
	}
	d.pendingHash = min(win-start, minMatchLength-1)
	return nil
}

// hashPending hashes the positions just before a restart point, once the
// bytes after them are in the window.
func (d *compressor) hashPending() {
	for ; d.pendingHash > 0; d.pendingHash-- {
		i := d.index - d.pendingHash
		if i+minMatchLength > d.windowEnd {
			return
		}
		d.insertHash(i)
	}
}

func (d *compressor) insertHash(i int) {
	hh := &d.hashHead[hash4(d.window[i:i+minMatchLength])&hashMask]
	d.hashPrev[i&windowMask] = *hh
	*hh = uint32(i + d.hashOffset)
}

// blockDone is called after each block: it reports the boundary and stops
// a segment at its last block.
func (d *compressor) blockDone(in int64, win int32) error {
	if d.onBlock != nil {
		d.onBlock(Boundary{In: in, Bit: d.w.bitsWritten(), Win: win})
	}
	switch {
	case d.stop == 0 || in < d.stop:
		return nil
	case in == d.stop:
		return errStop
	}
	return ErrDiverged
}

// endSpeedBlock ends a BestSpeed block: its input leaves the window.
func (d *compressor) endSpeedBlock() {
	in := d.base + int64(d.windowEnd)
	d.base = in
	d.windowEnd = 0
	if d.err == nil {
		d.err = d.blockDone(in, 0)
	}
}

// writePending writes every pending bit, the last byte zero-padded.
func (w *huffmanBitWriter) writePending() {
	n := w.nbytes
	for w.nbits > 0 {
		w.bytes[n] = byte(w.bits)
		w.bits >>= 8
		w.nbits -= min(w.nbits, 8)
		n++
	}
	w.write(w.bytes[:n])
	w.nbytes = 0
}

// MaskSegment zeroes, in b (a stream's bytes from the one holding bit
// from), the bits before from and, with to >= 0, those from to on in b's
// last byte: what CompressSegment leaves to the neighbouring segments.
func MaskSegment(b []byte, from, to int64) {
	b[0] &^= byte(1<<(from&7)) - 1
	if to >= 0 && to&7 != 0 {
		b[len(b)-1] &= byte(1<<(to&7)) - 1
	}
}

// Joiner writes segments, in stream order, as one stream: the partial
// byte where two segments meet holds bits of both.
type Joiner struct {
	W     io.Writer
	carry []byte // the last, partial byte of the previous segment
}

// Add writes seg, the output of CompressSegment from a boundary at bit
// from to one at bit to (to < 0: the segment ends the stream).
func (j *Joiner) Add(seg []byte, from, to int64) error {
	if len(seg) == 0 {
		return fmt.Errorf("deflate: empty segment")
	}
	if (from&7 != 0) != (len(j.carry) == 1) {
		return fmt.Errorf("deflate: segment at bit %d does not meet the previous one", from)
	}
	if len(j.carry) == 1 {
		seg[0] |= j.carry[0]
		j.carry = j.carry[:0]
	}
	if to >= 0 && to&7 != 0 {
		j.carry = append(j.carry, seg[len(seg)-1])
		seg = seg[:len(seg)-1]
	}
	_, err := j.W.Write(seg)
	return err
}
