package deflate

import (
	"math/bits"
	"sync"
)

// TokenPool lends token slices to decoders collecting a parse's tokens
// (AppendTokens), so that a restore decoding thousands of files reuses
// the room of the tokens it has passed instead of allocating and clearing
// it again: in a profile of level-6 restores with parses, that took ~5%
// of the CPU. A slice of more than 512 tokens comes with a power-of-two
// capacity (a smaller one is allocated, and not taken back); one that grew past its
// capacity is not taken back either. A slice handed to Put must not be
// used again by anyone. Safe for concurrent use; the zero value is ready.
type TokenPool struct {
	classes [maxTokenClass - minTokenClass + 1]sync.Pool // *[]Token
}

// The pooled capacities: 1K to 8M tokens (4 KiB to 32 MiB).
const (
	minTokenClass = 10
	maxTokenClass = 23
)

// tokenClass is the least c with 1<<c >= n.
func tokenClass(n int) int { return bits.Len(uint(max(n, 1) - 1)) }

// Get returns an empty slice with room for at least n tokens.
func (p *TokenPool) Get(n int) []Token {
	c := tokenClass(n)
	if p == nil || c < minTokenClass || c > maxTokenClass {
		return make([]Token, 0, n)
	}
	if v, ok := p.classes[c-minTokenClass].Get().(*[]Token); ok {
		return (*v)[:0]
	}
	return make([]Token, 0, 1<<c)
}

// Put takes back a slice Get returned, for another Get to reuse.
func (p *TokenPool) Put(ts []Token) {
	c := tokenClass(cap(ts))
	if p == nil || cap(ts) != 1<<c || c < minTokenClass || c > maxTokenClass {
		return
	}
	ts = ts[:0]
	p.classes[c-minTokenClass].Put(&ts)
}
