// Package parallel runs a long operation's work on several goroutines with
// bounded concurrency, and reports its progress while it runs; the garbage
// collector, scrub and the filesystem driver's bulk delete share it.
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

// Report calls report every interval until stop is called, and once more
// then, so that the last report has the final counts.
func Report(interval time.Duration, report func()) (stop func()) {
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
				report()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		report()
	}
}
