package gc

import (
	"math/bits"

	"github.com/cairn-registry/cairn/internal/digestkey"
)

// dkey is a digest in fixed size (package digestkey): sets of dkeys are
// what keeps the marked set small, 33 bytes a blob. The full spelling of
// longer digests is kept aside (collector.keys) for building paths.
type dkey = digestkey.Key

// idxSet is a set of revision indexes of one repository, as a sorted list
// while it is sparse and as a bitmap once that is smaller: a tag whose index
// names 100,000 manifests costs 12.5 KB, not 400 KB.
type idxSet struct {
	list []uint32
	bits []uint64
	n    int
}

// add inserts i, one of n revisions. Listings deliver a tag's entries in
// order, so the list stays sorted; an out-of-order index goes to the bitmap.
func (s *idxSet) add(i uint32, n int) {
	if s.bits == nil {
		if len(s.list) == 0 || s.list[len(s.list)-1] < i {
			s.list = append(s.list, i)
			s.n++
			if len(s.list)*32 <= n {
				return
			}
		} else if s.list[len(s.list)-1] == i {
			return
		}
		s.toBits(n)
		if s.has(i) {
			return
		}
	}
	w := &s.bits[i/64]
	if *w&(1<<(i%64)) == 0 {
		*w |= 1 << (i % 64)
		s.n++
	}
}

func (s *idxSet) toBits(n int) {
	s.bits = make([]uint64, (n+63)/64)
	for _, j := range s.list {
		s.bits[j/64] |= 1 << (j % 64)
	}
	s.list = nil
}

func (s *idxSet) has(i uint32) bool {
	if s.bits != nil {
		return int(i/64) < len(s.bits) && s.bits[i/64]&(1<<(i%64)) != 0
	}
	for _, j := range s.list {
		if j == i {
			return true
		}
	}
	return false
}

// each calls fn for every index in increasing order until fn returns false.
func (s *idxSet) each(fn func(i uint32) bool) bool {
	if s.bits == nil {
		for _, i := range s.list {
			if !fn(i) {
				return false
			}
		}
		return true
	}
	for w, word := range s.bits {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &^= 1 << b
			if !fn(uint32(w*64 + b)) {
				return false
			}
		}
	}
	return true
}
