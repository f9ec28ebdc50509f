package gc

import (
	"encoding/hex"
	"math/bits"
	"strings"

	"github.com/opencontainers/go-digest"
)

// dkey is a digest in fixed size: an algorithm code and the first 32 bytes
// of the sum (all of a sha256 sum). Two sha384 or sha512 digests that share
// their first 256 bits do not exist in practice; their full spelling is kept
// aside (collector.long) for building paths. Sets of dkeys are what keeps
// the marked set small: 33 bytes a blob, no strings, no pointers.
type dkey [33]byte

// Algorithm codes; their order is the algorithms' lexical order, so keys
// sort like the paths a listing returns them in.
const (
	algSHA256 = 1
	algSHA384 = 2
	algSHA512 = 3
)

// hexLen is the hex length of each algorithm's digests, by code.
var hexLen = [4]int{0, 64, 96, 128}

// algName is each code's algorithm name.
var algName = [4]string{"", "sha256", "sha384", "sha512"}

func algCode(alg string) byte {
	switch alg {
	case "sha256":
		return algSHA256
	case "sha384":
		return algSHA384
	case "sha512":
		return algSHA512
	}
	return 0
}

// parseKey turns the parts of a digest found in a path into a key. It
// refuses unknown algorithms, wrong lengths and anything but lower-case hex
// (a sha256 hex under sha512/ is refused, as are upper-case spellings).
func parseKey(alg, hexs string) (dkey, bool) {
	var k dkey
	c := algCode(alg)
	if c == 0 || len(hexs) != hexLen[c] {
		return k, false
	}
	for i := 0; i < len(hexs); i++ {
		if b := hexs[i]; !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f') {
			return k, false
		}
	}
	k[0] = c
	if _, err := hex.Decode(k[1:], []byte(hexs[:64])); err != nil {
		return k, false
	}
	return k, true
}

// keyOf is parseKey for a digest value.
func keyOf(d digest.Digest) (dkey, bool) {
	alg, hexs, ok := strings.Cut(string(d), ":")
	if !ok {
		return dkey{}, false
	}
	return parseKey(alg, hexs)
}

func (k dkey) alg() string { return algName[k[0]] }

// isShort reports whether the key holds the whole digest (sha256).
func (k dkey) isShort() bool { return k[0] == algSHA256 }

// hexOfShort is the hex of a sha256 key.
func (k dkey) hexOfShort() string { return hex.EncodeToString(k[1:]) }

func compareKeys(a, b dkey) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

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
