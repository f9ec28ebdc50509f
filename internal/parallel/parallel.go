// Package parallel runs a long operation's work on several goroutines with
// bounded concurrency: over an index range (For) or fed as it is found
// (Pool). The garbage collector, scrub, dedup, the registry, the web page
// and the filesystem driver's bulk delete share it; the calls beside such
// an operation (heartbeats, progress, retries) are package repeat's.
package parallel

import (
	"context"
	"sync"
	"sync/atomic"
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
