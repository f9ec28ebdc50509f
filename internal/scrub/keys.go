package scrub

import (
	"bytes"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
)

// key is a digest in fixed size: an algorithm code and the first 32 bytes
// of the sum (all of a sha256 sum). The sets of every blob and every file
// are slices of keys, 33 or 34 bytes an entry, no strings and no pointers;
// the full spelling of the rare longer digests is kept aside (longHex).
type key [33]byte

// Algorithm codes, in the algorithms' lexical order so that keys sort as
// the paths a listing returns them in.
const (
	algSHA256 = 1
	algSHA384 = 2
	algSHA512 = 3
)

var hexLen = [4]int{0, 64, 96, 128}

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

// parseKey turns the parts of a digest found in a path into a key; it
// refuses unknown algorithms, wrong lengths and anything but lower-case hex.
func parseKey(alg, hexs string) (key, bool) {
	var k key
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
func keyOf(d digest.Digest) (key, bool) {
	alg, hexs, ok := strings.Cut(string(d), ":")
	if !ok {
		return key{}, false
	}
	return parseKey(alg, hexs)
}

func (k key) alg() string { return algName[k[0]] }

// short reports whether the key holds the whole digest.
func (k key) short() bool { return k[0] == algSHA256 }

func compareKeys(a, b key) int { return bytes.Compare(a[:], b[:]) }

// keySet is a sorted set of keys; add appends (listings deliver keys in
// order) and seal sorts whatever was not.
type keySet []key

func (s *keySet) add(k key) {
	if n := len(*s); n > 0 && (*s)[n-1] == k {
		return
	}
	*s = append(*s, k)
}

func (s *keySet) seal() {
	if !slices.IsSortedFunc(*s, compareKeys) {
		slices.SortFunc(*s, compareKeys)
	}
	*s = slices.Compact(*s)
}

func (s keySet) has(k key) bool {
	_, ok := slices.BinarySearchFunc(s, k, compareKeys)
	return ok
}

// Blob flags in blobSet.
const (
	bData   uint8 = 1 << iota // blobs/.../data is stored
	bRecipe                   // blobs/.../recipe is stored
)

type blobEntry struct {
	k     key
	flags uint8
}

// blobSet is every blob directory the listing found, sorted by key: 34
// bytes a blob.
type blobSet []blobEntry

func (s *blobSet) add(k key, f uint8) {
	if n := len(*s); n > 0 && (*s)[n-1].k == k {
		(*s)[n-1].flags |= f
		return
	}
	*s = append(*s, blobEntry{k: k, flags: f})
}

func (s *blobSet) seal() {
	cmp := func(a, b blobEntry) int { return compareKeys(a.k, b.k) }
	if slices.IsSortedFunc(*s, cmp) {
		return
	}
	slices.SortStableFunc(*s, cmp)
	out := (*s)[:0]
	for _, e := range *s {
		if n := len(out); n > 0 && out[n-1].k == e.k {
			out[n-1].flags |= e.flags
			continue
		}
		out = append(out, e)
	}
	*s = out
}

// flags returns the flags of k, 0 when the listing did not find it.
func (s blobSet) flags(k key) uint8 {
	i, ok := slices.BinarySearchFunc(s, k, func(e blobEntry, k key) int { return compareKeys(e.k, k) })
	if !ok {
		return 0
	}
	return s[i].flags
}
