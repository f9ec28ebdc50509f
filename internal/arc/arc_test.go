package arc

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkInvariants fails if any ARC bound or list total is wrong.
func checkInvariants[V any](t *testing.T, a *Cache[V]) {
	t.Helper()
	c := a.capacity
	if a.Bytes() > c {
		t.Fatalf("resident %d bytes > capacity %d", a.Bytes(), c)
	}
	if a.t1.bytes+a.b1.bytes > c {
		t.Fatalf("T1+B1 = %d bytes > capacity %d", a.t1.bytes+a.b1.bytes, c)
	}
	if tot := a.t1.bytes + a.t2.bytes + a.b1.bytes + a.b2.bytes; tot > 2*c {
		t.Fatalf("directory %d bytes > 2*capacity %d", tot, 2*c)
	}
	if a.p < 0 || a.p > c {
		t.Fatalf("p = %d outside [0, %d]", a.p, c)
	}
	n := 0
	for _, l := range []*list[V]{&a.t1, &a.t2, &a.b1, &a.b2} {
		var bytes int64
		cnt := 0
		for e := l.root.next; e != &l.root; e = e.next {
			if e.list != l || a.items[e.key] != e {
				t.Fatalf("entry %q misfiled", e.key)
			}
			bytes += e.cost
			cnt++
		}
		if bytes != l.bytes || cnt != l.n {
			t.Fatalf("list totals %d/%d, counted %d/%d", l.bytes, l.n, bytes, cnt)
		}
		n += cnt
	}
	if n != len(a.items) {
		t.Fatalf("%d entries in lists, %d in map", n, len(a.items))
	}
}

func TestRecencyAndFrequency(t *testing.T) {
	a := New[int](40, nil)
	for i, k := range []string{"a", "b", "c", "d"} {
		a.Add(k, i, 10)
	}
	if _, ok := a.Get("a"); !ok { // a is now frequent
		t.Fatal("a missing")
	}
	a.Add("e", 4, 10) // evicts the least recent once-seen key: b
	for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true, "e": true} {
		if got := a.Contains(k); got != want {
			t.Errorf("Contains(%q) = %v, want %v", k, got, want)
		}
	}
	if v, ok := a.Get("c"); !ok || v != 2 {
		t.Errorf("Get(c) = %v, %v", v, ok)
	}
	if a.Len() != 4 || a.Bytes() != 40 {
		t.Errorf("Len, Bytes = %d, %d; want 4, 40", a.Len(), a.Bytes())
	}
	checkInvariants(t, a)
}

func TestRejectsOversize(t *testing.T) {
	var evicted []string
	a := New(100, func(k string, _ string) { evicted = append(evicted, k) })
	a.Add("x", "small", 50)
	if a.Add("x", "huge", 101) {
		t.Fatal("entry larger than capacity admitted")
	}
	if a.Contains("x") || a.Len() != 0 || a.Bytes() != 0 {
		t.Fatalf("old value of x kept: len %d bytes %d", a.Len(), a.Bytes())
	}
	if !slices.Equal(evicted, []string{"x"}) {
		t.Fatalf("evicted = %v, want [x]", evicted)
	}
	if !a.Add("y", "full", 100) || a.Bytes() != 100 {
		t.Fatal("entry of exactly capacity not admitted")
	}
}

func TestScanResistance(t *testing.T) {
	a := New[int](100, nil)
	hot := []string{"h0", "h1", "h2", "h3", "h4"}
	for _, k := range hot {
		a.Add(k, 0, 10)
	}
	for range 2 {
		for _, k := range hot {
			a.Get(k)
		}
	}
	for i := range 1000 { // a one-pass scan: each key once
		a.Add(fmt.Sprintf("scan%d", i), i, 10)
		checkInvariants(t, a)
	}
	for _, k := range hot {
		if !a.Contains(k) {
			t.Errorf("hot key %s flushed by a scan", k)
		}
	}
}

func TestGhostHitsAdaptTarget(t *testing.T) {
	a := New[int](100, nil)
	for i := range 10 {
		a.Add(fmt.Sprintf("k%d", i), i, 10)
	}
	for i := 5; i < 10; i++ { // k5..k9 become frequent, leaving T1 half full
		a.Get(fmt.Sprintf("k%d", i))
	}
	for i := 10; i < 15; i++ { // push k0..k4 out of T1 into B1
		a.Add(fmt.Sprintf("k%d", i), i, 10)
	}
	if a.Contains("k0") || a.items["k0"] == nil || a.items["k0"].list != &a.b1 {
		t.Fatal("k0 should be a B1 ghost")
	}
	if a.p != 0 {
		t.Fatalf("p = %d before any ghost hit", a.p)
	}
	a.Add("k0", 0, 10) // B1 ghost hit: recency deserved more room
	if a.p <= 0 {
		t.Fatalf("p = %d after a B1 hit, want > 0", a.p)
	}
	if a.items["k0"].list != &a.t2 {
		t.Fatal("ghost hit should enter T2")
	}
	checkInvariants(t, a)

	// Make T2 entries, push them out into B2, then hit one: p must fall.
	b := New[int](100, nil)
	b.p = 100 // pretend recency had won, so T2 is what gives way
	for i := range 10 {
		k := fmt.Sprintf("f%d", i)
		b.Add(k, i, 10)
		b.Get(k)
	}
	for i := range 10 {
		b.Add(fmt.Sprintf("n%d", i), i, 10)
	}
	e := b.items["f0"]
	if e == nil || e.list != &b.b2 {
		t.Fatal("f0 should be a B2 ghost")
	}
	before := b.p
	b.Add("f0", 0, 10)
	if b.p >= before {
		t.Fatalf("p = %d after a B2 hit, want < %d", b.p, before)
	}
	checkInvariants(t, b)
}

// TestRandomOps drives random adds, gets and removes with random costs
// and checks the byte bounds after every operation and that onEvict fires
// exactly once for every value that left.
func TestRandomOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	live := map[string]int{} // key -> value id the cache should hold
	var a *Cache[int]
	a = New(1000, func(k string, v int) {
		if got, ok := live[k]; !ok || got != v {
			t.Fatalf("onEvict(%q, %d): live value is %d, %v", k, v, got, ok)
		}
		delete(live, k)
	})
	id := 0
	for i := range 20000 {
		k := fmt.Sprintf("k%d", rng.IntN(200))
		switch op := rng.IntN(10); {
		case op < 5:
			id++
			cost := rng.Int64N(300) + 1
			if rng.IntN(50) == 0 {
				cost = 1001 + rng.Int64N(100)
			}
			if a.Add(k, id, cost) {
				live[k] = id
			} else if _, ok := live[k]; ok {
				t.Fatalf("op %d: %q still live after rejected Add", i, k)
			}
		case op < 9:
			v, ok := a.Get(k)
			if want, live := live[k]; ok != live || (ok && v != want) {
				t.Fatalf("op %d: Get(%q) = %d, %v; want %d, %v", i, k, v, ok, want, live)
			}
		default:
			_, wasLive := live[k]
			if a.Remove(k) != wasLive {
				t.Fatalf("op %d: Remove(%q) disagrees with liveness %v", i, k, wasLive)
			}
		}
		checkInvariants(t, a)
		if a.Len() != len(live) {
			t.Fatalf("op %d: %d resident, %d live", i, a.Len(), len(live))
		}
	}
	keys := a.Keys()
	slices.Sort(keys)
	var want []string
	for k := range live {
		want = append(want, k)
	}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("resident %v, live %v", keys, want)
	}
}

// TestTargetSteersEviction checks that p decides which list gives way:
// with T1 below its target, room comes from T2.
func TestTargetSteersEviction(t *testing.T) {
	for _, tc := range []struct {
		p           int64
		wantEvicted string
	}{{0, "r0"}, {100, "f0"}} {
		a := New[int](100, nil)
		for i := range 5 {
			k := fmt.Sprintf("f%d", i)
			a.Add(k, i, 10)
			a.Get(k)
		}
		for i := range 5 {
			a.Add(fmt.Sprintf("r%d", i), i, 10)
		}
		a.p = tc.p
		a.Add("new", 0, 10)
		if a.Contains(tc.wantEvicted) {
			t.Errorf("p=%d: %s still resident, want it evicted", tc.p, tc.wantEvicted)
		}
		if a.Len() != 10 {
			t.Errorf("p=%d: %d resident, want 10", tc.p, a.Len())
		}
	}
}
