package parsebench

import (
	"slices"
	"testing"
)

func lits(n int64) entry { return kindLit | entry(n) }

func foreign(n int64) entry { return kindForeign | entry(n) }

func TestParseToken(t *testing.T) {
	var p parse
	for _, tk := range []Token{
		{Kind: Literal, Len: 1}, {Kind: Stored, Len: 4}, {Kind: Match, Len: 258, Dist: 32768},
		{Kind: Literal, Len: 1}, {Kind: Literal, Len: 1},
	} {
		p.token(tk)
	}
	want := parse{lits(5), matchEntry(258, 32768), lits(2)}
	if !slices.Equal(p, want) {
		t.Fatalf("got %x, want %x", p, want)
	}
	if p[1].size() != 258 || p[1].dist() != 32768 {
		t.Fatalf("match unpacks as %d/%d", p[1].size(), p[1].dist())
	}
}

func TestExtract(t *testing.T) {
	// [0,10) literals, [10,15) match 5/3, [15,17) literals, [17,37) match 20/15.
	layer := parse{lits(10), matchEntry(5, 3), lits(2), matchEntry(20, 15)}
	c := cursor{p: layer}
	for _, tc := range []struct {
		s, e int64
		want parse
	}{
		{0, 4, parse{lits(4)}},
		{4, 12, parse{lits(6), matchEntry(5, 3)}}, // the match reaches back 3 from offset 6: inside
		{12, 30, parse{foreign(3), lits(2), matchEntry(20, 15)&^kindMask | kindBack}},
		{30, 40, parse{foreign(7)}},
	} {
		if got := c.extract(tc.s, tc.e); !slices.Equal(got, tc.want) {
			t.Errorf("extract(%d, %d) = %x, want %x", tc.s, tc.e, got, tc.want)
		}
	}
}

func TestAgree(t *testing.T) {
	collect := func(a, b parse, size int64) []interval {
		var iv intervals
		agree(a, b, size, func(lo, hi int64, back bool) {
			if !back {
				iv.add(lo, hi)
			}
		})
		return iv
	}
	a := parse{lits(5), matchEntry(4, 2), lits(3)}
	for _, tc := range []struct {
		b    parse
		size int64
		want []interval
	}{
		{a, 12, []interval{{0, 12}}},
		{parse{lits(5), matchEntry(4, 3), lits(3)}, 12, []interval{{0, 5}, {9, 12}}},
		{parse{lits(2), matchEntry(3, 1), matchEntry(4, 2), lits(3)}, 12, []interval{{0, 2}, {5, 12}}},
		{parse{lits(6), lits(6)}, 12, []interval{{0, 5}, {9, 12}}},
		{parse{foreign(5), matchEntry(4, 2), lits(3)}, 12, []interval{{5, 12}}},
		// A match running past the end agrees only up to the size.
		{parse{lits(5), matchEntry(4, 2), lits(3)}, 7, []interval{{0, 7}}},
	} {
		if got := collect(a, tc.b, tc.size); !slices.Equal(got, tc.want) {
			t.Errorf("agree(%x) = %v, want %v", tc.b, got, tc.want)
		}
	}
}

func TestAgreeBack(t *testing.T) {
	back := matchEntry(4, 9)&^kindMask | kindBack
	a := parse{lits(2), back, lits(3)}
	var strict, lenient int64
	agree(a, a, 9, func(lo, hi int64, isBack bool) {
		lenient += hi - lo
		if !isBack {
			strict += hi - lo
		}
	})
	if strict != 5 || lenient != 9 {
		t.Fatalf("strict %d lenient %d, want 5 and 9", strict, lenient)
	}
}

func TestExceptions(t *testing.T) {
	p := parse{lits(10), matchEntry(5, 3), lits(5), matchEntry(4, 1)}
	x := exceptions(p, []interval{{0, 4}, {10, 15}, {17, 20}})
	// Runs: literals [4,10); literals [15,17); the match [20,24).
	want := Exceptions{Runs: 3, Tokens: 3, Bytes: 12, Size: 3 + 3 + 4}
	if x != want {
		t.Fatalf("got %+v, want %+v", x, want)
	}
	// A match only partly covered is an exception; an adjacent literal
	// run joins its run.
	x = exceptions(p, []interval{{0, 12}})
	if want := (Exceptions{Runs: 1, Tokens: 3, Bytes: 14}); x.Runs != want.Runs || x.Tokens != want.Tokens || x.Bytes != want.Bytes {
		t.Fatalf("got %+v, want %+v", x, want)
	}
	if x := exceptions(p, []interval{{0, 24}}); x != (Exceptions{}) {
		t.Fatalf("fully covered: %+v", x)
	}
}
