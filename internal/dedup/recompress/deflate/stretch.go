package deflate

import (
	"errors"
	"fmt"
	"io"
	"unsafe"
)

// Searching one stretch. Levels 4–9 decide every token from the window
// before it, the bytes after it and the lazy matcher's state, and at any
// token boundary that state is one a fresh matcher rebuilds: after a match
// it is empty; after a literal it is the match found at the boundary, which
// the encoder searched with the same threshold a fresh matcher uses (a
// literal is written only when that search ran), from the same chains.
// So from any token boundary, with the 32 KiB before it hashed and the
// window index the stream had there (see restart), the matcher emits the
// stream's own tokens again. A rebuild that takes most tokens from
// elsewhere (the stored parses of a layer's files) searches only the
// stretches between them with SearchStretch.

// StretchLookahead is how many input bytes past a stretch that does not
// end its stream SearchStretch needs: the matcher decides a position's
// token only after it has looked this far ahead of the next one.
const StretchLookahead = minMatchLength + maxMatchLength + 2

// ErrNotSearchable means a level's tokens cannot be searched stretch by
// stretch.
var ErrNotSearchable = errors.New("deflate: level cannot search a stretch")

// Searchable reports whether SearchStretch can reproduce a level's tokens.
func Searchable(level int) bool {
	return level == DefaultCompression || (level >= 4 && level <= 9)
}

// SearchStretch emits, through emit, the tokens the level's encoder wrote
// for the n input bytes from a token boundary of its stream. hist holds the input before that point (at least
// min(its offset, HistoryLen(level)) bytes; more is ignored) and win is the
// window index the encoder had there (as Boundary.Win). in holds the
// stretch's input and StretchLookahead bytes after it, or, with final, the
// rest of the stream. emit gets the tokens in order, in batches it must
// not keep. A token that runs past n fails with ErrDiverged: the point or
// its end was not where a token of the stream ends.
func SearchStretch(level int, hist []byte, win int32, in []byte, n int, final bool, emit func([]Token) error) error {
	if !Searchable(level) {
		return fmt.Errorf("%w: %d", ErrNotSearchable, level)
	}
	if n < 0 || n > len(in) || !final && len(in) < n+StretchLookahead {
		return fmt.Errorf("deflate: stretch of %d bytes with %d bytes of input", n, len(in))
	}
	if !final {
		in = in[:n+StretchLookahead]
	}
	if need := min(HistoryLen(level), int(win)); len(hist) < need {
		return fmt.Errorf("deflate: stretch needs %d bytes of history, got %d", need, len(hist))
	}
	var d compressor
	if err := d.init(io.Discard, level); err != nil {
		return err
	}
	left := n
	d.sink = func(ts []token) error {
		if left == 0 {
			return errStop
		}
		k := 0
		for k < len(ts) && left > 0 {
			left -= ts[k].size()
			k++
		}
		if left < 0 {
			return fmt.Errorf("%w: a token runs %d bytes past the stretch", ErrDiverged, -left)
		}
		if err := emit(searchedTokens(ts[:k])); err != nil {
			return err
		}
		if left == 0 {
			return errStop
		}
		return nil
	}
	if err := d.restart(hist, int(win)); err != nil {
		return err
	}
	_, err := d.write(in)
	if err == nil {
		// Whatever is queued is decided: the matcher looked far enough
		// ahead, or, with final, the stream ends here.
		d.sync = final
		d.step(&d)
		if d.err == nil && len(d.tokens) > 0 {
			d.err = d.sink(d.tokens)
		}
		err = d.err
	}
	switch {
	case errors.Is(err, errStop) || err == nil && left == 0:
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("%w: the stretch ended %d bytes early", ErrDiverged, left)
}

// searchedTokens views the encoder's tokens as Tokens; both are uint32.
func searchedTokens(ts []token) []Token {
	return unsafe.Slice((*Token)(unsafe.SliceData(ts)), len(ts))
}

// size is how many input bytes t stands for. It has no branch: a run of
// tokens is summed by the loops that follow known tokens, where literals
// and matches alternate too irregularly to predict. A literal has neither
// type nor length bits; a match's type bit adds the two that, with the
// one every token has, make its length from xlength.
func (t token) size() int {
	return int(uint32(t)>>lengthShift&0xff) + 1 + 2*int(uint32(t)>>30)
}

// WindowAt is the window index levels 2–9 have at input offset in, away
// from the end of the stream, or -1 where it depends on the tokens before
// (see winAt): a stretch may start there only with a known index.
func WindowAt(in int64) int32 { return winAt(in) }

// KeepTokens makes w (levels 2–9) Huffman-code every block, never storing
// one: a block stored because coding did not pay keeps its bytes but not
// the tokens the matcher chose, and a file's stored parse must keep them,
// since the layers holding the file may have coded those bytes. It costs
// at most a few bytes per block of input that does not compress. Call it
// before the first Write.
func (w *Writer) KeepTokens() { w.d.keepTokens = true }
