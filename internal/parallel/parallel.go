// Package parallel runs a long operation's work on several goroutines with
// bounded concurrency, and beside it the periodic calls it needs (progress
// reports, heartbeats, lease renewals) and the retries of its transient
// failures; the garbage collector, scrub, dedup, the GC protocol and the
// filesystem driver's bulk delete share it.
package parallel

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// For calls fn(0..n-1) from up to conc goroutines (the caller's among them)
// and returns once every call has ended. It stops handing out indexes once
// ctx is done, and returns how many it handed out: indexes at or past it
// were never attempted.
func For(ctx context.Context, n, conc int, fn func(i int)) int {
	if n <= 0 {
		return 0
	}
	var next atomic.Int64
	work := func() {
		for ctx.Err() == nil {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			fn(i)
		}
	}
	var wg sync.WaitGroup
	for range min(max(conc, 1), n) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	return min(int(next.Load()), n)
}

// Every calls fn every interval until stop is called; stop returns once a
// call under way has ended.
func Every(interval time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// Report is Every for a progress report: it hands progress() to report,
// and once more at stop, so that the last report has the final counts. A
// nil report (the caller wants none) costs nothing.
func Report[P any](interval time.Duration, report func(P), progress func() P) (stop func()) {
	if report == nil {
		return func() {}
	}
	send := func() { report(progress()) }
	stopEvery := Every(interval, send)
	return func() {
		stopEvery()
		send()
	}
}

// Retry calls fn up to attempts times, waiting longer after each failure
// (100 ms, 400 ms, 900 ms, ...), until it succeeds, fails with an error
// final accepts (one a second try cannot change, such as not-found), or
// ctx ends. It returns fn's last error, or ctx's.
func Retry(ctx context.Context, attempts int, final func(error) bool, fn func() error) error {
	var err error
	for attempt := range attempts {
		if attempt > 0 {
			t := time.NewTimer(time.Duration(attempt*attempt) * 100 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		err = fn()
		if err == nil || final(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// Pool runs fn for every job sent to it from a fixed number of goroutines:
// a listing feeds it while workers read what the listing found.
type Pool[T any] struct {
	ch chan T
	wg sync.WaitGroup
}

// StartPool starts n workers calling fn.
func StartPool[T any](n int, fn func(T)) *Pool[T] {
	p := &Pool[T]{ch: make(chan T, n)}
	for range n {
		p.wg.Go(func() {
			for j := range p.ch {
				fn(j)
			}
		})
	}
	return p
}

// Send hands j to a worker, waiting while all are busy; it fails only when
// ctx is done.
func (p *Pool[T]) Send(ctx context.Context, j T) error {
	select {
	case p.ch <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait closes the pool and waits for its jobs to finish.
func (p *Pool[T]) Wait() {
	close(p.ch)
	p.wg.Wait()
}
