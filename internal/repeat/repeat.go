// Package repeat calls a function again: every interval beside an
// operation in progress (heartbeats, lease renewals, progress reports) and
// after a transient failure (Retry, with a growing wait). The garbage
// collector, scrub, dedup and the GC protocol share it.
package repeat

import (
	"context"
	"sync"
	"time"
)

// Every calls fn every interval until stop is called; stop returns once a
// call under way has ended. It beats beside an operation in progress
// (heartbeat, lease renewal, progress), so it is not a task: a beat queued
// behind other work could miss the deadline it keeps.
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
			if err := Sleep(ctx, time.Duration(attempt*attempt)*100*time.Millisecond); err != nil {
				return err
			}
		}
		err = fn()
		if err == nil || final(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// Sleep waits d, or until ctx ends and then returns its error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
