package cache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/cairn-registry/cairn/internal/arc"
)

// Memory is the prefetch cache: whole intact layers read ahead from a slow
// storage backend into memory, ARC-bounded in bytes. Only entries of at most
// half the capacity are kept, so one layer cannot flush the rest. A reader
// that Opens a layer while its fill runs streams the bytes as they arrive:
// a GET never reads the backend a second time beside a prefetch.
//
// Memory is safe for concurrent use. Slices returned by Get are shared and
// must not be modified.
type Memory struct {
	capacity int64
	stats    counters

	mu      sync.Mutex
	arc     *arc.Cache[[]byte]
	flights map[string]*memFlight
}

type memFlight struct {
	done    chan struct{} // closed when err is set
	err     error
	waiters int // Fill callers still waiting; the fill is cancelled when none are
	cancel  context.CancelFunc

	mu    sync.Mutex
	more  sync.Cond // broadcast on every write and at the end
	buf   []byte    // written so far; its capacity is the size, so it never moves
	ended bool
	fail  error // why the fill ended without its bytes, for streaming readers
}

// NewMemory returns an empty Memory holding at most capacity bytes.
func NewMemory(capacity int64) *Memory {
	m := &Memory{capacity: max(capacity, 0), flights: make(map[string]*memFlight)}
	m.arc = arc.New(m.capacity, func(string, []byte) { m.stats.evictions.Add(1) })
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
		fl = &memFlight{done: make(chan struct{}), cancel: cancel, buf: make([]byte, 0, size)}
		fl.more.L = &fl.mu
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
	err := fill(ctx, &memWriter{ctx: ctx, fl: fl})
	fl.mu.Lock()
	buf := fl.buf
	if err == nil && int64(len(buf)) != size {
		err = fmt.Errorf("%w: fill wrote %d of %d bytes", ErrSizeMismatch, len(buf), size)
	}
	if err != nil {
		m.stats.fillErrors.Add(1)
		err = fmt.Errorf("cache: filling %s: %w", key, err)
	}
	fl.ended, fl.fail = true, err
	fl.more.Broadcast()
	fl.mu.Unlock()
	m.mu.Lock()
	if m.flights[key] == fl {
		delete(m.flights, key)
	}
	if err == nil {
		m.arc.Add(key, buf, size)
	}
	m.mu.Unlock()
	fl.err = err
	close(fl.done)
}

// Open returns a reader of key from offset: its cached bytes, or those of
// the fill under way as they arrive (it fails if the fill does). It returns
// nil, counting a miss, when key is neither cached nor filling or offset
// is past its end.
func (m *Memory) Open(key string, offset int64) io.ReadCloser {
	m.mu.Lock()
	b, ok := m.arc.Get(key)
	fl := m.flights[key]
	m.mu.Unlock()
	switch {
	case ok && offset <= int64(len(b)):
		m.stats.hits.Add(1)
		return io.NopCloser(bytes.NewReader(b[offset:]))
	case !ok && fl != nil && offset <= int64(cap(fl.buf)):
		m.stats.shared.Add(1)
		return &memReader{fl: fl, pos: int(offset)}
	}
	m.stats.misses.Add(1)
	return nil
}

// Warm reports whether key is cached or filling, without counting a
// lookup or touching its recency.
func (m *Memory) Warm(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.arc.Contains(key) || m.flights[key] != nil
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
	fl  *memFlight
}

func (w *memWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	fl := w.fl
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(p) > cap(fl.buf)-len(fl.buf) {
		return 0, fmt.Errorf("%w: fill writes past %d bytes", ErrSizeMismatch, cap(fl.buf))
	}
	fl.buf = append(fl.buf, p...)
	fl.more.Broadcast()
	return len(p), nil
}

// memReader streams a fill's bytes as they are written.
type memReader struct {
	fl  *memFlight
	pos int
}

func (r *memReader) Read(p []byte) (int, error) {
	fl := r.fl
	fl.mu.Lock()
	defer fl.mu.Unlock()
	for r.pos >= len(fl.buf) && !fl.ended {
		fl.more.Wait()
	}
	if r.pos < len(fl.buf) {
		n := copy(p, fl.buf[r.pos:])
		r.pos += n
		return n, nil
	}
	if fl.fail != nil {
		return 0, fl.fail
	}
	return 0, io.EOF
}

func (r *memReader) Close() error { return nil }

var _ io.Writer = (*memWriter)(nil)
