package cache

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// Memory is the prefetch cache: whole intact layers read ahead from a slow
// storage backend into memory, ARC-bounded in bytes. Only entries of at most
// half the capacity are kept, so one layer cannot flush the rest.
//
// Memory is safe for concurrent use. Slices returned by Get are shared and
// must not be modified.
type Memory struct {
	capacity int64
	stats    counters

	mu      sync.Mutex
	arc     *ARC[[]byte]
	flights map[string]*memFlight
}

type memFlight struct {
	done    chan struct{} // closed when err is set
	err     error
	waiters int // callers still waiting; the fill is cancelled when none are
	cancel  context.CancelFunc
}

// NewMemory returns an empty Memory holding at most capacity bytes.
func NewMemory(capacity int64) *Memory {
	m := &Memory{capacity: max(capacity, 0), flights: make(map[string]*memFlight)}
	m.arc = NewARC(m.capacity, func(string, []byte) { m.stats.evictions.Add(1) })
	return m
}

// Get returns the bytes of key if they are cached.
func (m *Memory) Get(key string) ([]byte, bool) {
	m.mu.Lock()
	b, ok := m.arc.Get(key)
	m.mu.Unlock()
	if ok {
		m.stats.hits.Add(1)
	} else {
		m.stats.misses.Add(1)
	}
	return b, ok
}

// Fill loads key with fill, which must write exactly size bytes, and blocks
// until it is done or ctx ends. It returns nil at once if key is cached or
// size is above half the capacity (not kept). Concurrent Fills of one key
// share one fill, which runs detached from any single caller and is
// cancelled only when every caller waiting for it has given up.
func (m *Memory) Fill(ctx context.Context, key string, size int64, fill FillFunc) error {
	if size < 0 {
		return fmt.Errorf("%w: negative size %d", ErrSizeMismatch, size)
	}
	if size > m.capacity/2 {
		m.stats.skipped.Add(1)
		return nil
	}
	m.mu.Lock()
	if m.arc.Contains(key) {
		m.mu.Unlock()
		return nil
	}
	fl := m.flights[key]
	if fl == nil {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		fl = &memFlight{done: make(chan struct{}), cancel: cancel}
		m.flights[key] = fl
		m.stats.misses.Add(1)
		go m.run(fctx, key, size, fl, fill)
	}
	fl.waiters++
	m.mu.Unlock()

	select {
	case <-fl.done:
		return fl.err
	case <-ctx.Done():
		m.mu.Lock()
		fl.waiters--
		if fl.waiters == 0 && m.flights[key] == fl {
			// Nobody wants it any more: stop it, and let the next Fill
			// start afresh rather than join a dying fill.
			delete(m.flights, key)
			fl.cancel()
		}
		m.mu.Unlock()
		return context.Cause(ctx)
	}
}

func (m *Memory) run(ctx context.Context, key string, size int64, fl *memFlight, fill FillFunc) {
	defer fl.cancel()
	w := &memWriter{ctx: ctx, buf: make([]byte, 0, size), max: int(size)}
	err := fill(ctx, w)
	if err == nil && int64(len(w.buf)) != size {
		err = fmt.Errorf("%w: fill wrote %d of %d bytes", ErrSizeMismatch, len(w.buf), size)
	}
	m.mu.Lock()
	if m.flights[key] == fl {
		delete(m.flights, key)
	}
	if err == nil {
		m.arc.Add(key, w.buf, size)
	}
	m.mu.Unlock()
	if err != nil {
		m.stats.fillErrors.Add(1)
		err = fmt.Errorf("cache: filling %s: %w", key, err)
	}
	fl.err = err
	close(fl.done)
}

// Remove drops key if it is cached.
func (m *Memory) Remove(key string) {
	m.mu.Lock()
	m.arc.Remove(key)
	m.mu.Unlock()
}

// Stats returns the counters and current sizes.
func (m *Memory) Stats() Stats {
	s := m.stats.stats()
	m.mu.Lock()
	s.Entries, s.Bytes, s.Filling = m.arc.Len(), m.arc.Bytes(), len(m.flights)
	m.mu.Unlock()
	return s
}

type memWriter struct {
	ctx context.Context // the fill's own context, alive while the fill runs
	buf []byte
	max int
}

func (w *memWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	if len(p) > w.max-len(w.buf) {
		return 0, fmt.Errorf("%w: fill writes past %d bytes", ErrSizeMismatch, w.max)
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

var _ io.Writer = (*memWriter)(nil)
