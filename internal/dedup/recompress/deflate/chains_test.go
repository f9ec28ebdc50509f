package deflate

import "testing"

// TestChainsNameEveryMatch: for every level that searches chains, each
// match of the encoder's own stream is found in the replayed chain of its
// first byte within the level's chain length, and its length is the
// agreement there: a match is named by its place alone.
func TestChainsNameEveryMatch(t *testing.T) {
	for name, in := range corpora(t) {
		for level := 4; level <= 9; level++ {
			stream := compressWhole(t, level, in, 1<<30, nil)
			c := NewChains(in)
			var d Decoder
			matches, far := 0, 0
			eachBlock(t, &d, stream, nil, func(b *Block) {
				at := int(b.In)
				for _, tok := range b.Tokens {
					if tok.IsMatch() {
						matches++
						place, ok := c.Place(at, tok.Dist(), levels[level].chain)
						if !ok {
							t.Fatalf("%s level %d: match at %d from %d back (length %d) is not in its chain", name, level, at, tok.Dist(), tok.Length())
						}
						if n := ImpliedLength(in, at, tok.Dist()); n != tok.Length() {
							t.Fatalf("%s level %d: match at %d from %d back has length %d, the agreement there is %d", name, level, at, tok.Dist(), tok.Length(), n)
						}
						if place > 0 {
							far++
						}
					}
					at += tok.Size()
				}
			})
			if level == 6 {
				t.Logf("%s level 6: %d matches, %d not the chain's first", name, matches, far)
			}
		}
	}
}

// TestChainsMissOtherMatches: a distance the chain does not hold (not the
// same hash, past the window) is not named.
func TestChainsMissOtherMatches(t *testing.T) {
	in := []byte("abcdXabcdYabcdZqrstqrst")
	c := NewChains(in)
	if p, ok := c.Place(5, 5, 128); !ok || p != 0 {
		t.Fatalf("abcd at 5 from 5 back: place %d, %v; want 0, true", p, ok)
	}
	if p, ok := c.Place(10, 10, 128); !ok || p != 1 {
		t.Fatalf("abcd at 10 from 10 back: place %d, %v; want 1, true", p, ok)
	}
	if _, ok := c.Place(10, 10, 1); ok {
		t.Fatal("abcd at 10 from 10 back named with a chain of one")
	}
	if _, ok := c.Place(19, 3, 128); ok {
		t.Fatal("qrst at 19 from 3 back named: the bytes there differ")
	}
	if p, ok := c.Place(19, 4, 128); !ok || p != 0 {
		t.Fatalf("qrst at 19 from 4 back: place %d, %v; want 0, true", p, ok)
	}
	if n := ImpliedLength(in, 19, 4); n != 4 {
		t.Fatalf("implied length at 19 from 4 back: %d, want 4", n)
	}
}
