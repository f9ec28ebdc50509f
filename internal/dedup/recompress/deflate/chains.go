package deflate

// Chains replays the hash chains of the level 4–9 encoder over an input,
// so that a match the search chose can be named by its place in the chain
// the search walked from the match's first byte (0: the latest earlier
// position with the same hash) rather than by its distance, and found
// again from its place. The search inserts every position (levels 4–9
// skip none) and walks the chain newest first, keeping the first
// candidate of the longest match: a match's place is below the level's
// chain length and its length is the agreement there (ImpliedLength).
// Only the window before a position is in its chain, so a replay needs
// the 32 KiB before the first position asked, not the input's start.
type Chains struct {
	in   []byte
	next int // the first position not inserted
	// head holds, per hash, the latest inserted position + 1 (0: none);
	// prev, per position modulo the window, the one before it in its
	// chain, likewise.
	head []int32
	prev []int32
}

// NewChains returns chains over in, none inserted.
func NewChains(in []byte) *Chains {
	return &Chains{in: in, head: make([]int32, hashSize), prev: make([]int32, windowSize)}
}

// chain inserts the positions of the window before pos not yet inserted
// and returns the head of pos's chain and the oldest position it may
// reach; head < low when the chain is empty.
func (c *Chains) chain(pos int) (head, low int) {
	low = max(pos-windowSize, 0)
	// Positions before the window are in no chain pos walks: skip them.
	c.next = max(c.next, low)
	end := min(pos, len(c.in)-minMatchLength+1)
	for i := c.next; i < end; i++ {
		h := hash4(c.in[i:])
		c.prev[i&windowMask] = c.head[h]
		c.head[h] = int32(i + 1)
	}
	c.next = max(c.next, end)
	return int(c.head[hash4(c.in[pos:])]) - 1, low
}

// Place returns the place of the candidate dist bytes back in the chain of
// position pos; ok is false when the chain does not reach it within limit
// candidates or the window. Positions are asked in increasing order.
func (c *Chains) Place(pos, dist, limit int) (place int, ok bool) {
	if pos < 0 || pos+minMatchLength > len(c.in) || dist < 1 || dist > windowSize {
		return 0, false
	}
	want := pos - dist
	i, low := c.chain(pos)
	for place = 0; place < limit && i >= low; place++ {
		if i == want {
			return place, true
		}
		if i == low {
			break // its prev entry is overwritten
		}
		i = int(c.prev[i&windowMask]) - 1
	}
	return 0, false
}

// Distance returns the distance back to the candidate at place in the
// chain of position pos; ok is false when the chain is shorter. Positions
// are asked in increasing order.
func (c *Chains) Distance(pos, place int) (dist int, ok bool) {
	if pos < 0 || pos+minMatchLength > len(c.in) {
		return 0, false
	}
	i, low := c.chain(pos)
	for ; place > 0 && i > low; place-- {
		i = int(c.prev[i&windowMask]) - 1
	}
	if place > 0 || i < low {
		return 0, false
	}
	return pos - i, true
}

// ImpliedLength is the length of a match at pos from dist bytes back that
// the search takes whole: the bytes that agree there, at most
// maxMatchLength and up to the end of in.
func ImpliedLength(in []byte, pos, dist int) int {
	n := min(maxMatchLength, len(in)-pos)
	return matchLen(in[pos:], in[pos-dist:], n)
}
