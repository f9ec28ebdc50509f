package deflate

import "testing"

func TestTokenPool(t *testing.T) {
	var p TokenPool
	for _, tc := range []struct{ n, cap int }{{0, 0}, {1, 1}, {512, 512}, {513, 1024}, {1024, 1024}, {1025, 2048}, {3 << 20, 4 << 20}, {9 << 20, 9 << 20}} {
		ts := p.Get(tc.n)
		if len(ts) != 0 || cap(ts) != tc.cap {
			t.Errorf("Get(%d): len %d cap %d, want 0 and %d", tc.n, len(ts), cap(ts), tc.cap)
		}
	}
	ts := append(p.Get(5000), LiteralToken('a'), LiteralToken('b'))
	p.Put(ts)
	again := p.Get(6000)
	if cap(again) != 8192 || len(again) != 0 {
		t.Fatalf("Get after Put: len %d cap %d", len(again), cap(again))
	}
	// Slices of other capacities are not taken back: a class only ever
	// hands out its own capacity.
	p.Put(make([]Token, 0, 3000))
	if got := p.Get(2049); cap(got) != 4096 {
		t.Fatalf("Get(2049) after Put of a 3000-token slice: cap %d", cap(got))
	}
	var nilPool *TokenPool
	if got := nilPool.Get(2000); cap(got) != 2000 {
		t.Fatalf("nil pool: cap %d", cap(got))
	}
	nilPool.Put(make([]Token, 0, 1024)) // no panic
}
