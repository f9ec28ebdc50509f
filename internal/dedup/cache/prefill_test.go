package cache

import (
	"bytes"
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// heldFill is a fill that says when it starts and writes its data once
// released: a rebuild that takes as long as a test wants.
type heldFill struct {
	key     string
	data    []byte
	started chan struct{} // closed when the fill starts
	release chan struct{} // closed by the test
	calls   atomic.Int32
}

func newHeldFill(seed uint64) *heldFill {
	return &heldFill{key: digestKey(seed), data: testData(10_000, seed), started: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldFill) fill(ctx context.Context, w io.Writer) error {
	if h.calls.Add(1) == 1 {
		close(h.started)
	}
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return writeAll(w, h.data)
}

func (h *heldFill) size() int64 { return int64(len(h.data)) }

func (h *heldFill) hasStarted() bool {
	select {
	case <-h.started:
		return true
	default:
		return false
	}
}

// waitStarted waits for h's fill to start; the bound only guards against a
// hang, it measures nothing.
func (h *heldFill) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-h.started:
	case <-time.After(time.Minute):
		t.Fatalf("fill of %s never started", h.key)
	}
}

func prefillAll(t *testing.T, d *Disk, hs ...*heldFill) {
	t.Helper()
	for _, h := range hs {
		if !d.Prefill(t.Context(), h.key, h.size(), h.fill) {
			t.Fatalf("Prefill(%s) queued nothing", h.key)
		}
	}
}

func wantStats(t *testing.T, d *Disk, prefills, queued int) {
	t.Helper()
	if s := d.Stats(); s.Prefills != prefills || s.Queued != queued {
		t.Fatalf("%d prefills running and %d queued, want %d and %d", s.Prefills, s.Queued, prefills, queued)
	}
}

// TestDiskOpenAheadOfPrefills: an Open that needs a fill starts it while
// prefills are queued and one runs; the running prefill pauses at its
// first write while that fill runs, and nothing else starts; then they go
// on, one at a time (limit 1).
func TestDiskOpenAheadOfPrefills(t *testing.T) {
	d, _ := openDisk(t, 1<<20)
	p := []*heldFill{newHeldFill(100), newHeldFill(101), newHeldFill(102), newHeldFill(103)}
	prefillAll(t, d, p...)
	p[0].waitStarted(t)
	wantStats(t, d, 1, 3)

	g := newHeldFill(110)
	r, hit, err := d.Open(t.Context(), g.key, g.size(), 0, g.fill)
	if err != nil || hit {
		t.Fatalf("Open: hit %v, err %v", hit, err)
	}
	g.waitStarted(t) // not behind the three queued prefills
	wantStats(t, d, 1, 3)

	close(p[0].release)
	waitFor(t, "the running prefill to yield", func() bool { return d.Stats().Yielding == 1 })
	if d.Contains(p[0].key) || p[1].hasStarted() {
		t.Fatal("a prefill went on while an Open waited for a fill")
	}

	close(g.release)
	if b := readAll(t, r); !bytes.Equal(b, g.data) {
		t.Fatal("Open read wrong bytes")
	}
	waitFor(t, "the first prefill published", func() bool { return d.Contains(p[0].key) })
	p[1].waitStarted(t)
	wantStats(t, d, 1, 2)
	if p[2].hasStarted() || p[3].hasStarted() {
		t.Fatal("more prefills running than the limit of one")
	}
	for _, h := range p[1:] {
		close(h.release)
		waitFor(t, "prefill published", func() bool { return d.Contains(h.key) })
	}
	for _, h := range append(p, g) {
		if c := h.calls.Load(); c != 1 {
			t.Errorf("fill of %s called %d times", h.key, c)
		}
	}
}

// TestDiskOpenPromotesQueuedPrefill: an Open of a key whose prefill waits
// in the queue starts the fill at once, ahead of the prefills queued
// before it, and the queued one never runs.
func TestDiskOpenPromotesQueuedPrefill(t *testing.T) {
	d, _ := openDisk(t, 1<<20)
	p := []*heldFill{newHeldFill(120), newHeldFill(121), newHeldFill(122)}
	prefillAll(t, d, p...)
	p[0].waitStarted(t)
	wantStats(t, d, 1, 2)

	g := &heldFill{key: p[2].key, data: p[2].data, started: make(chan struct{}), release: make(chan struct{})}
	r, hit, err := d.Open(t.Context(), g.key, g.size(), 0, g.fill)
	if err != nil || hit {
		t.Fatalf("Open: hit %v, err %v", hit, err)
	}
	g.waitStarted(t)
	wantStats(t, d, 1, 1) // the first prefill runs, the second waits
	if d.Prefill(t.Context(), p[2].key, p[2].size(), p[2].fill) {
		t.Fatal("Prefill queued a key being filled")
	}
	close(g.release)
	if b := readAll(t, r); !bytes.Equal(b, g.data) {
		t.Fatal("Open read wrong bytes")
	}
	close(p[0].release)
	p[1].waitStarted(t)
	close(p[1].release)
	waitFor(t, "prefills published", func() bool { return d.Contains(p[0].key) && d.Contains(p[1].key) })
	if p[2].calls.Load() != 0 || g.calls.Load() != 1 {
		t.Fatalf("queued fill called %d times, the Open's %d; want 0 and 1", p[2].calls.Load(), g.calls.Load())
	}
}

// TestDiskOpenJoinsRunningPrefill: an Open of a key being prefilled reads
// that fill (no second one) and from then on it is a fill an Open waits
// for: it leaves the prefill count, it does not yield, the other running
// prefill pauses, and no prefill starts until it ends.
func TestDiskOpenJoinsRunningPrefill(t *testing.T) {
	d, _ := openDisk(t, 1<<20)
	d.SetPrefillLimit(2)
	p := []*heldFill{newHeldFill(130), newHeldFill(131), newHeldFill(132)}
	prefillAll(t, d, p...)
	p[0].waitStarted(t)
	p[1].waitStarted(t)
	wantStats(t, d, 2, 1)

	r, hit, err := d.Open(t.Context(), p[0].key, p[0].size(), 0, newHeldFill(139).fill)
	if err != nil || hit {
		t.Fatalf("Open: hit %v, err %v", hit, err)
	}
	wantStats(t, d, 1, 1)
	close(p[1].release)
	waitFor(t, "the other prefill to yield", func() bool { return d.Stats().Yielding == 1 })
	if p[2].hasStarted() || d.Contains(p[1].key) {
		t.Fatal("a prefill went on while an Open waited for the one it joined")
	}
	close(p[0].release)
	if b := readAll(t, r); !bytes.Equal(b, p[0].data) {
		t.Fatal("Open read wrong bytes")
	}
	waitFor(t, "the second prefill published", func() bool { return d.Contains(p[1].key) })
	p[2].waitStarted(t)
	close(p[2].release)
	waitFor(t, "prefill published", func() bool { return d.Contains(p[2].key) })
	if s := d.Stats(); p[0].calls.Load() != 1 || s.Shared != 1 {
		t.Fatalf("joined fill called %d times, %d shared; want 1 and 1", p[0].calls.Load(), s.Shared)
	}
}

// TestDiskPrefillLimit: however many are queued, at most the limit of
// prefill fills run at once.
func TestDiskPrefillLimit(t *testing.T) {
	d, _ := openDisk(t, 1<<20)
	d.SetPrefillLimit(3)
	release := make(chan struct{})
	var running, most atomic.Int32
	const n = 10
	for i := range uint64(n) {
		data := testData(1000, 140+i)
		d.Prefill(t.Context(), digestKey(140+i), int64(len(data)), func(ctx context.Context, w io.Writer) error {
			now := running.Add(1)
			defer running.Add(-1)
			for {
				m := most.Load()
				if now <= m || most.CompareAndSwap(m, now) {
					break
				}
			}
			<-release
			return writeAll(w, data)
		})
	}
	waitFor(t, "three prefills running", func() bool { return running.Load() >= 3 })
	wantStats(t, d, 3, n-3)
	close(release)
	for i := range uint64(n) {
		waitFor(t, "prefills published", func() bool { return d.Contains(digestKey(140 + i)) })
	}
	if m := most.Load(); m != 3 {
		t.Fatalf("%d prefills ran at once, want 3", m)
	}
}

// TestDiskPrefillQueueBound: a full queue drops its oldest prefill, and
// Close drops them all without running them.
func TestDiskPrefillQueueBound(t *testing.T) {
	d, _ := openDisk(t, 1<<30)
	first := newHeldFill(1000)
	prefillAll(t, d, first)
	first.waitStarted(t)
	var calls atomic.Int32
	fill := func(ctx context.Context, w io.Writer) error {
		calls.Add(1)
		return writeAll(w, make([]byte, 10))
	}
	for i := range uint64(maxQueued + 1) {
		if !d.Prefill(t.Context(), digestKey(1001+i), 10, fill) {
			t.Fatalf("prefill %d not queued", i)
		}
	}
	wantStats(t, d, 1, maxQueued)
	if d.Prefill(t.Context(), digestKey(1002), 10, fill) {
		t.Fatal("second queued prefill was dropped, or queued twice")
	}
	if !d.Prefill(t.Context(), digestKey(1001), 10, fill) {
		t.Fatal("oldest queued prefill was not the one dropped")
	}
	d.Close()
	if s := d.Stats(); s.Queued != 0 || calls.Load() != 0 {
		t.Fatalf("after Close: %d queued, %d queued fills ran", s.Queued, calls.Load())
	}
}
