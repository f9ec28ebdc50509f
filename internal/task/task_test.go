package task

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestPriorities: with one worker busy, queued tasks run highest priority
// first, oldest first within a priority.
func TestPriorities(t *testing.T) {
	r := New(1, 10, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	block := make(chan struct{})
	started := make(chan struct{})
	r.Submit("blocker", Normal, func(context.Context) error { close(started); <-block; return nil })
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	add := func(name string, p Priority) {
		wg.Add(1)
		if !r.Submit(name, p, func(context.Context) error {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			wg.Done()
			return nil
		}) {
			t.Fatalf("submit %s refused", name)
		}
	}
	go r.Run(ctx)
	<-started
	add("low1", Low)
	add("normal1", Normal)
	add("high1", High)
	add("low2", Low)
	add("high2", High)
	close(block)
	wg.Wait()
	want := []string{"high1", "high2", "normal1", "low1", "low2"}
	if !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}

// TestQueueBounded: a full queue refuses, per priority.
func TestQueueBounded(t *testing.T) {
	r := New(1, 2, nil)
	nop := func(context.Context) error { return nil }
	if !r.Submit("a", Low, nop) || !r.Submit("b", Low, nop) {
		t.Fatal("refused below the bound")
	}
	if r.Submit("c", Low, nop) {
		t.Fatal("accepted past the bound")
	}
	if !r.Submit("d", High, nop) {
		t.Fatal("another priority's queue is full too")
	}
	if r.Queued() != 3 {
		t.Fatalf("Queued = %d", r.Queued())
	}
}

// TestStopDropsQueuedAndCancelsRunning: when the Runner's context ends, a
// running task sees its context cancelled, queued ones never run, and Run
// returns once the running one has.
func TestStopDropsQueuedAndCancelsRunning(t *testing.T) {
	r := New(1, 10, nil)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var ranQueued atomic.Bool
	r.Submit("running", High, func(ctx context.Context) error { close(started); <-ctx.Done(); return ctx.Err() })
	r.Submit("queued", Low, func(context.Context) error { ranQueued.Store(true); return nil })
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	<-started
	cancel()
	<-done
	if ranQueued.Load() {
		t.Fatal("a queued task ran after the stop")
	}
	if r.Submit("late", High, func(context.Context) error { return nil }) {
		t.Fatal("a stopped Runner accepted a task")
	}
}

// TestEvery: a periodic task runs each period, and a period whose previous
// run is still going is skipped rather than queued behind it.
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(2, 10, nil)
		ctx, cancel := context.WithCancel(context.Background())
		var runs atomic.Int32
		release := make(chan struct{})
		r.Every("slow", time.Minute, time.Minute, High, func(context.Context) error {
			if runs.Add(1) == 1 {
				<-release // the first run outlasts three periods
			}
			return nil
		})
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		time.Sleep(4*time.Minute + time.Second) // runs at 1m; 2m..4m+jitter are skipped
		synctest.Wait()
		if n := runs.Load(); n != 1 {
			t.Fatalf("%d runs while the first was going, want 1", n)
		}
		close(release)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if n := runs.Load(); n < 2 {
			t.Fatalf("%d runs after the first ended, want more", n)
		}
		cancel()
		<-done
	})
}
