// Package arc is an Adaptive Replacement Cache bounded in bytes, for any
// value: dedup's layer caches, the registry's manifest cache and the blob
// descriptor cache each keep their entries in one. It has no cairn imports,
// so the caches above it share it without importing one another.
package arc

// Cache is an Adaptive Replacement Cache (Megiddo & Modha, FAST '03) keyed by
// string and bounded in bytes: every entry has a cost, the resident lists T1
// (seen once recently) and T2 (seen at least twice) together never hold more
// than the capacity, the ghost lists B1 and B2 remember the keys (not the
// values) recently evicted from T1 and T2, and the target size p of T1 moves
// in bytes. A one-pass scan of new keys only churns T1, so frequently used
// entries in T2 survive it.
//
// A Cache is not safe for concurrent use: its users guard it with their
// own mutex, which they also need around the work that surrounds it.
type Cache[V any] struct {
	capacity int64
	p        int64 // target bytes for T1
	t1, t2   list[V]
	b1, b2   list[V]
	items    map[string]*entry[V] // resident and ghost entries
	onEvict  func(key string, v V)
}

// New returns an empty Cache holding at most capacity bytes. onEvict, if
// not nil, is called exactly once for every admitted value that leaves the
// cache: evicted for room, dropped by Remove, or replaced by Add of the same
// key. It runs synchronously inside the Cache method and must not call
// back into the Cache.
func New[V any](capacity int64, onEvict func(key string, v V)) *Cache[V] {
	if capacity < 0 {
		capacity = 0
	}
	a := &Cache[V]{capacity: capacity, items: make(map[string]*entry[V]), onEvict: onEvict}
	for _, l := range []*list[V]{&a.t1, &a.t2, &a.b1, &a.b2} {
		l.init()
	}
	return a
}

// Get returns the value of a resident key and marks it frequently used
// (T1 -> T2, or to the front of T2).
func (a *Cache[V]) Get(key string) (V, bool) {
	e := a.items[key]
	if e == nil || e.list == &a.b1 || e.list == &a.b2 {
		var zero V
		return zero, false
	}
	e.list.remove(e)
	a.t2.pushFront(e)
	return e.val, true
}

// Peek returns the value of a resident key without changing its standing.
func (a *Cache[V]) Peek(key string) (V, bool) {
	e := a.items[key]
	if e == nil || e.list == &a.b1 || e.list == &a.b2 {
		var zero V
		return zero, false
	}
	return e.val, true
}

// Contains reports whether key is resident, without changing its standing.
func (a *Cache[V]) Contains(key string) bool {
	_, ok := a.Peek(key)
	return ok
}

// Add stores v under key at the given cost in bytes and reports whether it
// was admitted. An entry costing more than the capacity is not admitted (and
// an older value of key is dropped). Costs below 1 count as 1 so that the
// lists stay bounded in entries too. A key found in a ghost list enters T2
// and moves p: towards recency on a B1 hit, towards frequency on a B2 hit.
func (a *Cache[V]) Add(key string, v V, cost int64) bool {
	if cost < 1 {
		cost = 1
	}
	e := a.items[key]
	if cost > a.capacity {
		if e != nil {
			a.drop(e)
		}
		return false
	}
	switch {
	case e == nil:
		e = &entry[V]{key: key, val: v, cost: cost}
		a.items[key] = e
		a.replace(cost, false)
		a.t1.pushFront(e)
	case e.list == &a.t1 || e.list == &a.t2:
		old := e.val
		e.list.remove(e)
		e.val, e.cost = v, cost
		a.replace(cost, false)
		a.t2.pushFront(e)
		if a.onEvict != nil {
			a.onEvict(key, old)
		}
	case e.list == &a.b1:
		// Recently evicted from T1: T1 was too small.
		a.p = min(a.p+delta(cost, a.b2.bytes, a.b1.bytes), a.capacity)
		a.b1.remove(e)
		e.val, e.cost = v, cost
		a.replace(cost, false)
		a.t2.pushFront(e)
	default: // B2
		// Recently evicted from T2: T2 was too small.
		a.p = max(a.p-delta(cost, a.b1.bytes, a.b2.bytes), 0)
		a.b2.remove(e)
		e.val, e.cost = v, cost
		a.replace(cost, true)
		a.t2.pushFront(e)
	}
	a.trimGhosts()
	return true
}

// delta is ARC's adaptation step, max(1, other/hit) in entries, scaled by
// the cost of the entry that hit so that p moves in bytes.
func delta(cost, other, hit int64) int64 {
	if hit <= 0 || other <= hit {
		return cost
	}
	return int64(float64(cost) * float64(other) / float64(hit))
}

// replace demotes entries from T1 or T2 into their ghost lists until cost
// more bytes fit. T1 gives way while it is above its target p.
func (a *Cache[V]) replace(cost int64, hitB2 bool) {
	for a.t1.bytes+a.t2.bytes+cost > a.capacity {
		fromT1 := a.t1.n > 0 && (a.t1.bytes > a.p || (hitB2 && a.t1.bytes >= a.p) || a.t2.n == 0)
		src, ghost := &a.t2, &a.b2
		if fromT1 {
			src, ghost = &a.t1, &a.b1
		}
		e := src.back()
		if e == nil {
			return // both empty: cost <= capacity fits
		}
		src.remove(e)
		v := e.val
		var zero V
		e.val = zero
		ghost.pushFront(e)
		if a.onEvict != nil {
			a.onEvict(e.key, v)
		}
	}
}

// trimGhosts keeps |T1|+|B1| <= c and |T1|+|T2|+|B1|+|B2| <= 2c, in bytes,
// forgetting the oldest ghosts first.
func (a *Cache[V]) trimGhosts() {
	for a.t1.bytes+a.b1.bytes > a.capacity && a.b1.n > 0 {
		a.forget(a.b1.back())
	}
	for a.t1.bytes+a.t2.bytes+a.b1.bytes+a.b2.bytes > 2*a.capacity {
		switch {
		case a.b2.n > 0:
			a.forget(a.b2.back())
		case a.b1.n > 0:
			a.forget(a.b1.back())
		default:
			return
		}
	}
}

func (a *Cache[V]) forget(e *entry[V]) {
	e.list.remove(e)
	delete(a.items, e.key)
}

// drop removes e from wherever it is, calling onEvict if it was resident.
func (a *Cache[V]) drop(e *entry[V]) bool {
	resident := e.list == &a.t1 || e.list == &a.t2
	a.forget(e)
	if resident && a.onEvict != nil {
		a.onEvict(e.key, e.val)
	}
	return resident
}

// Remove drops key, resident or ghost, and reports whether a resident value
// was removed (onEvict is called for it).
func (a *Cache[V]) Remove(key string) bool {
	e := a.items[key]
	if e == nil {
		return false
	}
	return a.drop(e)
}

// Len is the number of resident entries.
func (a *Cache[V]) Len() int { return a.t1.n + a.t2.n }

// Bytes is the total cost of the resident entries; never above Capacity.
func (a *Cache[V]) Bytes() int64 { return a.t1.bytes + a.t2.bytes }

// Capacity is the byte bound given to New.
func (a *Cache[V]) Capacity() int64 { return a.capacity }

// Keys returns the resident keys, most recently used first within T2 then T1.
func (a *Cache[V]) Keys() []string {
	keys := make([]string, 0, a.Len())
	for _, l := range []*list[V]{&a.t2, &a.t1} {
		for e := l.root.next; e != &l.root; e = e.next {
			keys = append(keys, e.key)
		}
	}
	return keys
}

type entry[V any] struct {
	key        string
	val        V
	cost       int64
	list       *list[V]
	prev, next *entry[V]
}

// list is a circular doubly linked list with a sentinel, front = most
// recently used; it keeps its entry count and byte total.
type list[V any] struct {
	root  entry[V]
	n     int
	bytes int64
}

func (l *list[V]) init() { l.root.next, l.root.prev = &l.root, &l.root }

func (l *list[V]) pushFront(e *entry[V]) {
	e.prev, e.next = &l.root, l.root.next
	l.root.next.prev = e
	l.root.next = e
	e.list = l
	l.n++
	l.bytes += e.cost
}

func (l *list[V]) remove(e *entry[V]) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next, e.list = nil, nil, nil
	l.n--
	l.bytes -= e.cost
}

func (l *list[V]) back() *entry[V] {
	if l.n == 0 {
		return nil
	}
	return l.root.prev
}
