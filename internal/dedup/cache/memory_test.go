package cache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
)

func TestMemorySingleflight(t *testing.T) {
	m := NewMemory(1 << 20)
	data := testData(100_000, 40)
	key := digestKey(40)
	fill, release, calls := gatedFill(data)
	const n = 16
	var wg, started sync.WaitGroup
	started.Add(n)
	for range n {
		wg.Go(func() {
			started.Done()
			if err := m.Fill(t.Context(), key, int64(len(data)), fill); err != nil {
				t.Error(err)
			}
		})
	}
	started.Wait()
	waitFor(t, "a fill to start", func() bool { return calls.Load() > 0 })
	close(release)
	wg.Wait()
	if c := calls.Load(); c != 1 {
		t.Fatalf("fill called %d times, want 1", c)
	}
	got, ok := m.Get(key)
	if !ok || !bytes.Equal(got, data) {
		t.Fatal("Get after Fill: missing or wrong bytes")
	}
	if err := m.Fill(t.Context(), key, int64(len(data)), fill); err != nil || calls.Load() != 1 {
		t.Fatalf("Fill of a cached key refilled (%d calls) or failed: %v", calls.Load(), err)
	}
	if s := m.Stats(); s.Hits != 1 || s.Misses != 1 || s.Entries != 1 || s.Bytes != int64(len(data)) {
		t.Fatalf("stats %+v", s)
	}
}

func TestMemorySkipsLargeAndBoundsBytes(t *testing.T) {
	m := NewMemory(10_000)
	fill, calls := countingFill(testData(5001, 41))
	if err := m.Fill(t.Context(), "big", 5001, fill); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Get("big"); ok || calls.Load() != 0 {
		t.Fatal("entry above half the capacity was loaded")
	}
	for i := range uint64(10) {
		fill, _ := countingFill(testData(3000, 50+i))
		if err := m.Fill(t.Context(), digestKey(50+i), 3000, fill); err != nil {
			t.Fatal(err)
		}
		if s := m.Stats(); s.Bytes > 10_000 {
			t.Fatalf("%d bytes cached > capacity", s.Bytes)
		}
	}
	s := m.Stats()
	if s.Entries != 3 || s.Evictions != 7 || s.Skipped != 1 {
		t.Fatalf("stats %+v", s)
	}
	if b, ok := m.Get(digestKey(59)); !ok || !bytes.Equal(b, testData(3000, 59)) {
		t.Fatal("newest entry missing")
	}
}

func TestMemoryFillErrors(t *testing.T) {
	m := NewMemory(1 << 20)
	errBad := errors.New("backend down")
	if err := m.Fill(t.Context(), "k", 10, func(ctx context.Context, w io.Writer) error { return errBad }); !errors.Is(err, errBad) {
		t.Fatalf("err %v", err)
	}
	short := func(ctx context.Context, w io.Writer) error { return writeAll(w, []byte("abc")) }
	if err := m.Fill(t.Context(), "k", 10, short); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("short fill err %v", err)
	}
	if _, ok := m.Get("k"); ok {
		t.Fatal("failed fill cached")
	}
}

func TestMemoryCancellation(t *testing.T) {
	m := NewMemory(1 << 20)
	data := testData(1000, 42)
	release := make(chan struct{})
	fillCtxDone := make(chan struct{})
	fill := func(ctx context.Context, w io.Writer) error {
		select {
		case <-release:
			return writeAll(w, data)
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	// One of two waiters gives up: the fill goes on for the other.
	ctx1, cancel1 := context.WithCancel(t.Context())
	errs := make(chan error, 2)
	go func() { errs <- m.Fill(ctx1, "k", 1000, fill) }()
	waitFor(t, "first waiter", func() bool { return m.Stats().Filling == 1 })
	go func() { errs <- m.Fill(t.Context(), "k", 1000, fill) }()
	waitFor(t, "second waiter", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.flights["k"] != nil && m.flights["k"].waiters == 2
	})
	cancel1()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	close(release)
	if err := <-errs; err != nil {
		t.Fatalf("remaining waiter: %v", err)
	}
	if b, ok := m.Get("k"); !ok || !bytes.Equal(b, data) {
		t.Fatal("fill did not complete for the remaining waiter")
	}

	// The only waiter gives up: the fill is cancelled.
	ctx2, cancel2 := context.WithCancel(t.Context())
	blocked := func(ctx context.Context, w io.Writer) error {
		<-ctx.Done()
		close(fillCtxDone)
		return ctx.Err()
	}
	go func() { errs <- m.Fill(ctx2, "k2", 1000, blocked) }()
	waitFor(t, "waiter", func() bool { return m.Stats().Filling == 1 })
	cancel2()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter: %v", err)
	}
	<-fillCtxDone
}

// TestMemoryOpenJoinsFill: a reader opened while a fill runs streams its
// bytes as they arrive (from any offset), with no second fill; one opened
// on a fill that fails gets the bytes written and then the error, never a
// clean end; a key neither cached nor filling opens nothing.
func TestMemoryOpenJoinsFill(t *testing.T) {
	m := NewMemory(1 << 20)
	data := testData(200_000, 60)
	key := digestKey(60)
	if rc := m.Open(key, 0); rc != nil {
		t.Fatal("Open of an unknown key returned a reader")
	}
	var calls int
	progress := make(chan struct{})
	release := make(chan struct{})
	fill := func(ctx context.Context, w io.Writer) error {
		calls++
		if err := writeAll(w, data[:50_000]); err != nil {
			return err
		}
		close(progress)
		<-release
		return writeAll(w, data[50_000:])
	}
	done := make(chan error, 1)
	go func() { done <- m.Fill(t.Context(), key, int64(len(data)), fill) }()
	<-progress
	if !m.Warm(key) {
		t.Fatal("a key being filled is not warm")
	}
	whole, part := m.Open(key, 0), m.Open(key, 120_000)
	if whole == nil || part == nil {
		t.Fatal("Open during a fill returned nothing")
	}
	if m.Open(key, int64(len(data))+1) != nil {
		t.Fatal("Open past the end returned a reader")
	}
	got := make([]byte, 50_000)
	if _, err := io.ReadFull(whole, got); err != nil || !bytes.Equal(got, data[:50_000]) {
		t.Fatalf("bytes written so far: %v", err)
	}
	close(release)
	rest, err := io.ReadAll(whole)
	if err != nil || !bytes.Equal(append(got, rest...), data) {
		t.Fatalf("joined reader: %d bytes, err %v", len(got)+len(rest), err)
	}
	if tail, err := io.ReadAll(part); err != nil || !bytes.Equal(tail, data[120_000:]) {
		t.Fatalf("joined reader from an offset: %d bytes, err %v", len(tail), err)
	}
	if err := <-done; err != nil || calls != 1 {
		t.Fatalf("fill: %d calls, err %v", calls, err)
	}
	if s := m.Stats(); s.Shared != 2 {
		t.Fatalf("stats %+v, want 2 shared", s)
	}

	errBad := errors.New("backend down")
	bad := digestKey(61)
	started, fail := make(chan struct{}), make(chan struct{})
	go m.Fill(t.Context(), bad, 10_000, func(ctx context.Context, w io.Writer) error {
		writeAll(w, data[:4096])
		close(started)
		<-fail
		return errBad
	})
	<-started
	r := m.Open(bad, 0)
	if r == nil {
		t.Fatal("Open during a fill returned nothing")
	}
	close(fail)
	b, err := io.ReadAll(r)
	if !errors.Is(err, errBad) || !bytes.Equal(b, data[:4096]) {
		t.Fatalf("reader of a failed fill: %d bytes, err %v", len(b), err)
	}
}
