// Package task runs cairn's background work in one shape, as zot's
// scheduler does: named tasks, periodic or queued, each with a priority,
// on a bounded pool of workers. Scheduled garbage collection, upload
// purging, dedup's periodic scan and its per-layer jobs and predicted
// warm-ups all go through one Runner.
//
// Lifecycle of a task: Submit queues it (or refuses when its priority's
// queue is full: the caller decides what a dropped task means); Every
// submits one each period, skipping a period while the previous run is
// still queued or running, so periodic work never piles up. Workers take
// the oldest task of the highest priority. A task runs to its end: a
// higher priority waits for a free worker, it never preempts. When the
// Runner's context ends, queued tasks are dropped and Run waits for the
// running ones, whose context is cancelled.
package task

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Priority orders queued tasks: higher first.
type Priority int

// Priorities.
const (
	Low    Priority = iota // best-effort work (predicted warm-ups)
	Normal                 // the bulk of background work (dedup jobs)
	High                   // maintenance that must not wait behind bulk (GC, purges)
	nPriorities
)

// Func is a task's body.
type Func func(ctx context.Context) error

// Runner runs tasks on a pool of workers. Its zero value is not usable;
// call New.
type Runner struct {
	workers  int
	queueMax int
	log      *slog.Logger

	mu        sync.Mutex
	cond      *sync.Cond // signalled when a task is queued or Run ends
	queues    [nPriorities][]*item
	schedules []schedule      // Every calls made before Run
	started   bool            // Run was called
	done      <-chan struct{} // Run's ctx.Done(), which ends the schedules
	stopped   bool
	wg        sync.WaitGroup // periodic schedules
}

type item struct {
	name string
	fn   Func
	done func() // called after the task ran (or was dropped)
}

type schedule struct {
	name          string
	first, period time.Duration
	prio          Priority
	fn            Func
}

// New returns a Runner with the given number of workers (at least one)
// whose queues hold at most queueMax tasks per priority.
func New(workers, queueMax int, log *slog.Logger) *Runner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{workers: max(workers, 1), queueMax: max(queueMax, 1), log: log}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// Submit queues fn under name; it reports false when the queue of prio is
// full or the Runner has stopped.
func (r *Runner) Submit(name string, prio Priority, fn Func) bool {
	return r.submit(&item{name: name, fn: fn}, prio)
}

func (r *Runner) submit(it *item, prio Priority) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped || len(r.queues[prio]) >= r.queueMax {
		return false
	}
	r.queues[prio] = append(r.queues[prio], it)
	r.cond.Signal()
	return true
}

// Every runs fn under name every period (plus up to a tenth of it at
// random, so that nodes sharing a store do not start together), the first
// time after first. A period whose previous run has not ended is skipped.
// It may be called before or after Run; the schedule ends with the Runner.
func (r *Runner) Every(name string, first, period time.Duration, prio Priority, fn Func) {
	s := schedule{name: name, first: first, period: period, prio: prio, fn: fn}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		r.schedules = append(r.schedules, s)
		return
	}
	r.startSchedule(s)
}

// startSchedule runs s's timer; r.mu is held and Run has started.
func (r *Runner) startSchedule(s schedule) {
	done := r.done
	r.wg.Go(func() {
		busy := make(chan struct{}, 1)
		wait := s.first
		for {
			t := time.NewTimer(wait)
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C:
			}
			wait = s.period + time.Duration(rand.Int64N(int64(s.period)/10+1))
			select {
			case busy <- struct{}{}:
			default:
				r.log.Info("task skipped: its previous run is still going", "task", s.name)
				continue
			}
			if !r.submit(&item{name: s.name, fn: s.fn, done: func() { <-busy }}, s.prio) {
				<-busy
				select {
				case <-done:
				default:
					r.log.Warn("task skipped: queue full", "task", s.name)
				}
			}
		}
	})
}

// Run runs the workers until ctx ends, then waits for the running tasks
// and the periodic schedules to end. Tasks still queued are dropped.
func (r *Runner) Run(ctx context.Context) {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		panic("task: Run called twice")
	}
	r.started, r.done = true, ctx.Done()
	for _, s := range r.schedules {
		r.startSchedule(s)
	}
	r.schedules = nil
	r.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.stopped = true
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	var workers sync.WaitGroup
	for range r.workers {
		workers.Go(func() { r.work(ctx) })
	}
	workers.Wait()
	r.mu.Lock()
	r.stopped = true
	var dropped []*item
	for p := range r.queues {
		dropped = append(dropped, r.queues[p]...)
		r.queues[p] = nil
	}
	r.mu.Unlock()
	for _, it := range dropped {
		if it.done != nil {
			it.done()
		}
	}
	r.wg.Wait()
}

func (r *Runner) work(ctx context.Context) {
	for {
		it := r.next()
		if it == nil {
			return
		}
		if ctx.Err() != nil {
			// Stopping: the flag that ends next may not be set yet.
			if it.done != nil {
				it.done()
			}
			return
		}
		r.runOne(ctx, it)
	}
}

func (r *Runner) runOne(ctx context.Context, it *item) {
	defer func() {
		if it.done != nil {
			it.done()
		}
	}()
	if err := it.fn(ctx); err != nil && ctx.Err() == nil {
		r.log.Warn("task failed", "task", it.name, "err", err)
	}
}

// next waits for a task and takes the oldest of the highest priority; nil
// once the Runner stops.
func (r *Runner) next() *item {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.stopped {
			return nil
		}
		for p := nPriorities - 1; p >= 0; p-- {
			if q := r.queues[p]; len(q) > 0 {
				it := q[0]
				q[0] = nil
				r.queues[p] = q[1:]
				return it
			}
		}
		r.cond.Wait()
	}
}

// Queued reports how many tasks wait, over all priorities.
func (r *Runner) Queued() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, q := range r.queues {
		n += len(q)
	}
	return n
}
