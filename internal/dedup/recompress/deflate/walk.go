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
// time, up to two bytes past the one holding the stream's last bit; a
// bufio.Reader is read from its buffer, and consumed up to a few bytes
// past that byte.
//
// The boundaries are those the encoder reported when it wrote the stream
// (Writer.OnBlock), so a recipe learns its restart points from the blob
// itself, before compressing anything. Boundary.Win is what levels 2–9
// had (see winAt); a boundary whose window index cannot be known from its
// offset alone is reported with Win -1.
func Walk(r io.ByteReader, onBlock func(Boundary)) (size, bits int64, err error) {
	var d Decoder
	d.count = true
	end := func() {}
	if br, ok := r.(peeker); ok {
		// Decode straight from the reader's buffer; consume what the
		// decoder loaded, and at the end only through the stream's end.
		var used, pending int64
		d.feed = func() ([]byte, error) {
			br.Discard(int(pending))
			used, pending = used+pending, 0
			if _, err := br.Peek(1); err != nil {
				return nil, err
			}
			b, _ := br.Peek(br.Buffered())
			pending = int64(len(b))
			return b, nil
		}
		end = func() {
			if n := (d.Bits()+7)/8 - used; n > 0 {
				br.Discard(int(n))
			}
		}
	} else {
		var one [1]byte
		d.feed = func() ([]byte, error) {
			c, err := r.ReadByte()
			one[0] = c
			return one[:], err
		}
	}
	for {
		b, _, err := d.Next(nil)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				err = fmt.Errorf("deflate: %w", err)
			}
			return 0, 0, err
		}
		if b.Final {
			end()
			return d.out, d.Bits(), nil
		}
		if onBlock != nil {
			onBlock(Boundary{In: d.out, Bit: d.Bits(), Win: winAt(d.out)})
		}
	}
}

// peeker is a buffered reader (bufio.Reader) Walk can read in chunks
// without consuming more than it decodes.
type peeker interface {
	Peek(n int) ([]byte, error)
	Discard(n int) (int, error)
	Buffered() int
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
