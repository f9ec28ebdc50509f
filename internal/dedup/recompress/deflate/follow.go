package deflate

import (
	"fmt"
	"io"
)

// Following known tokens. A rebuild that knows most of a stream's tokens
// (the stored parses of a layer's files) runs one encoder over the whole
// input that, inside each known stretch, takes the stretch's tokens in
// place of searching: it hashes every position they cover, as the search
// would have (levels 4–9 hash every position), so the matcher is ready
// wherever the search resumes, at the stretch's end, with the fresh lazy
// state a token boundary allows (see SearchStretch). Blocks are cut, and
// stored or coded, by the encoder's own rules, so when the tokens are the
// stream's the output is the stream, bit for bit; when they are not, it is
// another valid stream of the same input, and the digest the caller checks
// says so.

// TokenSource yields the known stretches of a stream in input order.
type TokenSource interface {
	// Next returns the next stretch: the input offset of its first token
	// and its tokens, valid until the following call. ok is false when no
	// stretch is left.
	Next() (off int64, tokens []Token, ok bool)
}

// follower walks a TokenSource for the encoder.
type follower struct {
	src    TokenSource
	off    int64   // input offset of the current stretch
	tokens []Token // what is left of it
	in     bool    // the encoder is inside it
	done   bool    // no stretch left
	// lastEnd is where the last stretch ended; hashedTo is the offset
	// before which every position a search may still reach is hashed.
	lastEnd, hashedTo int64
}

// next loads the following stretch.
func (f *follower) next() {
	f.in = false
	for !f.done {
		off, ts, ok := f.src.Next()
		if !ok {
			f.done = true
			return
		}
		if len(ts) > 0 {
			f.off, f.tokens = off, ts
			return
		}
	}
}

// CompressFollowing writes to w the raw DEFLATE stream the level's encoder
// (4–9) writes for in, searching only between the stretches src knows (see
// the comment above). A stretch that does not start at a token boundary of
// the encoder's own parse fails with ErrDiverged.
func CompressFollowing(w io.Writer, level int, in []byte, src TokenSource) error {
	if !Searchable(level) {
		return fmt.Errorf("%w: %d", ErrNotSearchable, level)
	}
	var d compressor
	if err := d.init(w, level); err != nil {
		return err
	}
	d.follow = &follower{src: src, lastEnd: -1}
	d.follow.next()
	if _, err := d.write(in); err != nil {
		return err
	}
	if err := d.close(); err != nil {
		return err
	}
	if !d.follow.done {
		return fmt.Errorf("%w: a stretch at %d lies past the input", ErrDiverged, d.follow.off)
	}
	return nil
}

// followStep is one step of the deflate loop at a position a known stretch
// may cover: it reports whether it consumed the step.
func (d *compressor) followStep() (bool, error) {
	f := d.follow
	pos := d.base + int64(d.index)
	if !f.in {
		if f.done || pos < f.off {
			return false, nil
		}
		if pos > f.off {
			return false, fmt.Errorf("%w: the search ran past a stretch at %d to %d", ErrDiverged, f.off, pos)
		}
		// At a token boundary the pending byte is a literal: the search
		// would have written the match pending from it only if no
		// better one starts here, and then this is no boundary.
		if d.byteAvailable && d.length >= minMatchLength && !d.betterMatchHere() {
			return false, fmt.Errorf("%w: a stretch at %d starts inside a match", ErrDiverged, pos)
		}
		if d.byteAvailable {
			d.tokens = append(d.tokens, literalToken(uint32(d.window[d.index-1])))
			d.byteAvailable = false
			if err := d.endToken(d.index); err != nil {
				return true, err
			}
		}
		f.in = true
		if pos != f.lastEnd {
			f.hashedTo = pos // the search hashed all it passed
		}
	}
	// Take the stretch's tokens in a row while the window holds what the
	// deflate loop would want ahead of them; it refills and calls again.
	// They are queued a run at a time, each run ending where a block
	// fills (and is written, as the search writes it) or the window does.
	for more := true; more; {
		// The run stops once the window has less than a search's
		// lookahead left after it. Only a token taken past that point
		// can run past the window's end, so that is checked once, after.
		ts := internalTokens(f.tokens[:min(len(f.tokens), maxFlateBlockTokens-len(d.tokens))])
		k, idx, last := 0, d.index, d.index
		full := d.windowEnd - (minMatchLength + maxMatchLength)
		for k < len(ts) {
			last = idx
			idx += ts[k].size()
			k++
			if idx > full {
				more = false
				break
			}
		}
		if idx > d.windowEnd {
			return false, fmt.Errorf("%w: a stretch's token at %d runs past the input", ErrDiverged, d.base+int64(last))
		}
		d.index = idx
		d.tokens = append(d.tokens, ts[:k]...)
		f.tokens = f.tokens[k:]
		if err := d.endToken(d.index); err != nil {
			return true, err
		}
		more = more && len(f.tokens) > 0
	}
	if len(f.tokens) == 0 {
		// The search resumes here, unless the next stretch starts here
		// too, with a fresh lazy state and the chains of the 32 KiB
		// before.
		d.length, d.offset, d.byteAvailable = minMatchLength-1, 0, false
		f.lastEnd = d.base + int64(d.index)
		f.next()
		if f.done || f.off != f.lastEnd {
			from := max(f.hashedTo, f.lastEnd-windowSize, d.base) - d.base
			for i := int(from); i < d.index && i < d.maxInsertIndex; i++ {
				d.insertHash(i)
			}
			f.hashedTo = f.lastEnd
		}
	}
	return true, nil
}

// endToken writes a block when the token just queued, ending at window
// index end, fills it, as the search does.
func (d *compressor) endToken(end int) error {
	if len(d.tokens) < maxFlateBlockTokens {
		return nil
	}
	if err := d.writeBlock(d.tokens, end); err != nil {
		return err
	}
	d.tokens = d.tokens[:0]
	return nil
}

// betterMatchHere reports whether the search, at the current position,
// finds a match longer than the one pending from the position before, as
// the deflate loop decides (without hashing the position: the stretch
// does).
func (d *compressor) betterMatchHere() bool {
	prevLength := d.length
	lookahead := d.windowEnd - d.index
	if d.index >= d.maxInsertIndex || lookahead <= prevLength || prevLength >= d.lazy {
		return false
	}
	head := int(d.hashHead[hash4(d.window[d.index:d.index+minMatchLength])&hashMask]) - d.hashOffset
	if head < max(d.index-windowSize, 0) {
		return false
	}
	n, _, ok := d.findMatch(d.index, head, minMatchLength-1, lookahead)
	return ok && n > prevLength
}
