package scrub

import (
	"slices"

	"github.com/cairn-registry/cairn/internal/digestkey"
)

// key is a digest in fixed size (package digestkey): the sets of every
// blob and every file are slices of keys, 33 or 34 bytes an entry; the full
// spelling of the rare longer digests is kept aside (scrubber.keys).
type key = digestkey.Key

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
	if !slices.IsSortedFunc(*s, digestkey.Compare) {
		slices.SortFunc(*s, digestkey.Compare)
	}
	*s = slices.Compact(*s)
}

func (s keySet) has(k key) bool {
	_, ok := slices.BinarySearchFunc(s, k, digestkey.Compare)
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
	cmp := func(a, b blobEntry) int { return digestkey.Compare(a.k, b.k) }
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
	i, ok := slices.BinarySearchFunc(s, k, func(e blobEntry, k key) int { return digestkey.Compare(e.k, k) })
	if !ok {
		return 0
	}
	return s[i].flags
}
