package main

import (
	"testing"

	"github.com/opencontainers/go-digest"
)

// TestKeepUnshared: a segment is kept only when every file in it passes
// the rule; a kept file's frame is saved only when no copy of it lies
// outside kept segments, and one a later layer holds too is stored twice.
func TestKeepUnshared(t *testing.T) {
	a, b, c, d := digest.FromString("a"), digest.FromString("b"), digest.FromString("c"), digest.FromString("d")
	layers := []unsharedLayer{
		{producer: "p", files: []tarFile{{a, 0, 50}, {b, 50, 100}, {c, 100, 200}, {d, 250, 350}},
			segs: []segment{{0, 100, 10}, {100, 300, 20}, {300, 400, 30}}},
		{producer: "q", files: []tarFile{{b, 10, 90}}, segs: []segment{{0, 100, 40}}},
	}
	holders := map[digest.Digest]int{a: 1, b: 2, c: 1, d: 1}
	first := map[digest.Digest]int{a: 0, b: 0, c: 0, d: 0}
	stored := map[digest.Digest]int64{a: 1, b: 2, c: 4, d: 8}
	alone := func(_ int, x digest.Digest) bool { return holders[x] == 1 }
	isNew := func(i int, x digest.Digest) bool { return first[x] == i }

	for _, tc := range []struct {
		name, producer string
		rule           func(int, digest.Digest) bool
		want           unsharedRule
	}{
		// Layer 0's first segment holds b, which layer 1 holds too, and
		// a, which stays stored as a file; d spans the last two.
		{"alone", "all", alone, unsharedRule{KeptBlob: 50, KeptTar: 300, Segments: 2, Frames: 4 + 8}},
		// Every file of layer 0 is new there, b is not in layer 1.
		{"new", "all", isNew, unsharedRule{KeptBlob: 60, KeptTar: 400, Segments: 3, Frames: 1 + 4 + 8, Twice: 2}},
		// Only layer 1 counted: b is new in layer 0, so nothing is kept.
		{"new", "q", isNew, unsharedRule{}},
	} {
		got := keepUnshared(layers, tc.name, tc.producer, tc.rule, holders, stored)
		tc.want.Name, tc.want.Producer = tc.name, tc.producer
		if *got != tc.want {
			t.Errorf("%s over %s: %+v, want %+v", tc.name, tc.producer, *got, tc.want)
		}
	}
}
