package config

import (
	"slices"
	"strings"
)

// nearest returns the key of known that key most likely misspells, or ""
// when none is close: the same letters in another case, one a prefix of
// the other ("rootdir" for rootdirectory), or an edit distance of at most
// one for keys of up to four letters and a third of the key's length
// (at least two) beyond.
func nearest(key string, known []string) string {
	lk := strings.ToLower(key)
	best, bestDist := "", -1
	for _, k := range slices.Sorted(slices.Values(known)) {
		lc := strings.ToLower(k)
		d := editDistance(lk, lc)
		limit := max(2, len(lc)/3)
		if len(lc) <= 4 {
			limit = 1
		}
		prefix := min(len(lk), len(lc)) >= 3 && (strings.HasPrefix(lc, lk) || strings.HasPrefix(lk, lc))
		if d > limit && !prefix {
			continue
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes
// (keys are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// didYouMean is "; did you mean X?" for the key of known nearest to key,
// or "" when none is close.
func didYouMean(key string, known []string) string {
	if n := nearest(key, known); n != "" {
		return "; did you mean " + n + "?"
	}
	return ""
}
