package cache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrClosed is returned by Open after Close.
	ErrClosed = errors.New("cache: closed")
	// ErrSizeMismatch means a fill wrote more or fewer bytes than announced,
	// or two callers announced different sizes for one key.
	ErrSizeMismatch = errors.New("cache: size mismatch")
	// ErrInvalidKey is returned for keys that cannot name a file.
	ErrInvalidKey = errors.New("cache: invalid key")
	// ErrInvalidOffset is returned for an offset outside [0, size].
	ErrInvalidOffset = errors.New("cache: invalid offset")
)

// FillFunc writes exactly the entry's size bytes to w and returns nil only if
// they are right (for layers: the digest verified). It must return soon after
// ctx is cancelled; writes to w fail once it is.
type FillFunc func(ctx context.Context, w io.Writer) error

// Stats are cumulative counters and current sizes, for export as metrics.
type Stats struct {
	Hits       uint64 // served from a complete entry
	Misses     uint64 // started a fill (including a prefill)
	Shared     uint64 // joined a fill already running
	Skipped    uint64 // Memory: Fill ignored an entry too large to keep
	Evictions  uint64 // complete entries dropped to make room
	FillErrors uint64 // fills that failed or wrote the wrong size
	Entries    int
	Bytes      int64
	Filling    int // fills running now
	Prefills   int // Disk: fills running now that no Open waits for
	Queued     int // Disk: prefills waiting to start
}

type counters struct {
	hits, misses, shared, skipped, evictions, fillErrors atomic.Uint64
}

func (c *counters) stats() Stats {
	return Stats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Shared: c.shared.Load(),
		Skipped: c.skipped.Load(), Evictions: c.evictions.Load(), FillErrors: c.fillErrors.Load(),
	}
}

// Disk is the preconstruct cache: restored layers as files in one directory.
//
// Lifecycle of an entry: the first Open of an absent key (or a Prefill of
// it, once the prefill starts) starts one fill writing <name>.<rand>.partial;
// every Open of that key while it runs reads the same file as it grows, and
// the last byte is released only after the fill returned nil, so a fill that
// fails its check never yields a complete body. On success the file is synced and renamed to <name>, which
// makes it a complete entry, admitted to an ARC bounded in bytes; on failure
// it is removed. Only complete entries survive a restart; a crash leaves
// .partial files, which OpenDisk deletes. Eviction unlinks the file; readers
// that already have it open keep reading.
//
// Fills an Open waits for go first; prefills (fills ahead of an expected
// Open) only use what they leave:
//   - An Open that needs a fill starts it at once, whatever prefills are
//     queued or running.
//   - Prefill queues; a queued prefill starts only while no running fill
//     has an Open waiting for it, and while fewer than the prefill limit
//     (SetPrefillLimit) of prefills run.
//   - An Open of a key whose prefill is queued takes it out of the queue
//     and starts the fill itself; an Open that joins a running prefill
//     waits for what is left of it, and from then on that fill is one an
//     Open waits for.
//
// A running fill is never stopped, so an Open shares the machine at most
// with the prefills that were running when it came.
//
// Disk is safe for concurrent use.
type Disk struct {
	dir      string
	capacity int64
	stats    counters

	mu      sync.Mutex // guards everything below and all renames/unlinks in dir
	arc     *ARC[diskEntry]
	flights map[string]*flight
	closed  bool
	running sync.WaitGroup

	// Prefills: queue holds the waiting ones, oldest first (*prefill),
	// queued indexes it by key. wanted counts the running fills an Open
	// waits for, ahead the running ones none does; at most prefillLimit
	// of those.
	queue        *list.List
	queued       map[string]*list.Element
	wanted       int
	ahead        int
	prefillLimit int
}

// maxQueued bounds the prefills waiting to start; beyond it the oldest is
// dropped: an Open has usually come for it already, or never will.
const maxQueued = 256

// prefill is a queued Prefill.
type prefill struct {
	ctx       context.Context
	key, name string
	size      int64
	fill      FillFunc
}

type diskEntry struct {
	name string
	size int64
}

// OpenDisk opens (creating it if needed) the cache directory dir holding at
// most capacity bytes of complete entries. Leftover partial files are deleted;
// complete entries are re-admitted, newest first, while they fit, and the
// rest are deleted. Files with names the cache does not make are left alone.
func OpenDisk(dir string, capacity int64) (*Disk, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	d := &Disk{
		dir: dir, capacity: max(capacity, 0), flights: make(map[string]*flight),
		queue: list.New(), queued: make(map[string]*list.Element), prefillLimit: 1,
	}
	d.arc = NewARC(d.capacity, func(_ string, e diskEntry) {
		// Under d.mu, so a fill of the same key cannot rename a new file
		// into place between the decision and the unlink.
		os.Remove(filepath.Join(d.dir, e.name))
		d.stats.evictions.Add(1)
	})
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	type found struct {
		key, name string
		size      int64
		mtime     time.Time
	}
	var complete []found
	for _, de := range ents {
		name := de.Name()
		if strings.HasSuffix(name, ".partial") {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("cache: removing leftover: %w", err)
			}
			continue
		}
		key, ok := decodeName(name)
		if !ok || !de.Type().IsRegular() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue // vanished meanwhile
		}
		complete = append(complete, found{key, name, fi.Size(), fi.ModTime()})
	}
	slices.SortFunc(complete, func(a, b found) int { return b.mtime.Compare(a.mtime) })
	var total int64
	n := 0
	for _, f := range complete {
		if total+max(f.size, 1) > d.capacity {
			os.Remove(filepath.Join(dir, f.name))
			continue
		}
		total += max(f.size, 1)
		complete[n] = f
		n++
	}
	// Oldest first, so the newest end up most recently used.
	for _, f := range slices.Backward(complete[:n]) {
		d.arc.Add(f.key, diskEntry{f.name, f.size}, f.size)
	}
	return d, nil
}

// Open returns a reader of entry key from offset to its end, and whether the
// entry was complete on disk (hit). If the entry is absent it is produced by
// fill, of which at most one runs per key; every reader streams the bytes as
// they are written. The fill does not depend on ctx's cancellation (it stops
// only on Close), so a caller hanging up does not break other readers; ctx
// only ends this caller's waits for bytes. A reader returns the fill's error,
// wrapped, if the fill fails before the reader got every byte.
func (d *Disk) Open(ctx context.Context, key string, size, offset int64, fill FillFunc) (io.ReadCloser, bool, error) {
	name, err := encodeName(key)
	if err != nil {
		return nil, false, err
	}
	if size < 0 || offset < 0 || offset > size {
		return nil, false, fmt.Errorf("%w: offset %d of %d bytes", ErrInvalidOffset, offset, size)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, false, ErrClosed
	}
	if e, ok := d.arc.Get(key); ok {
		if e.size == size {
			// Opened under d.mu: eviction cannot unlink it in between.
			f, err := os.Open(filepath.Join(d.dir, e.name))
			if err == nil {
				d.stats.hits.Add(1)
				return &fileReader{io.NewSectionReader(f, offset, size-offset), f}, true, nil
			}
		}
		// Deleted behind our back, or stored with another size: refill.
		d.arc.Remove(key)
	}
	fl := d.flights[key]
	if fl != nil {
		if fl.size != size {
			return nil, false, fmt.Errorf("%w: %s is being filled with %d bytes, not %d", ErrSizeMismatch, key, fl.size, size)
		}
		d.stats.shared.Add(1)
		if fl.filling && !fl.wanted {
			// A prefill this Open now waits for: no longer ahead.
			fl.wanted = true
			d.ahead--
			d.wanted++
		}
	} else {
		// A queued prefill of key is this fill, started now.
		d.unqueue(key)
		if fl, err = d.start(ctx, key, name, size, fill, true); err != nil {
			return nil, false, err
		}
	}
	// Each reader has its own descriptor, so renames and unlinks of the
	// path never disturb it.
	f, err := os.Open(fl.partial)
	if err != nil {
		return nil, false, fmt.Errorf("cache: %w", err)
	}
	r := &flightReader{fl: fl, f: f, pos: offset}
	r.stop = context.AfterFunc(ctx, func() {
		fl.mu.Lock()
		r.ctxErr = context.Cause(ctx)
		fl.cond.Broadcast()
		fl.mu.Unlock()
	})
	return r, false, nil
}

// Prefill queues a fill of key, to run in the background ahead of an Open,
// unless key is complete, being filled or queued, or too large to keep
// (prefilling what cannot be kept is wasted work); it reports whether it
// queued one. The fill starts when Disk's rules allow (see Disk); a full
// queue drops its oldest prefill. It returns at once; ctx supplies
// values, not cancellation.
func (d *Disk) Prefill(ctx context.Context, key string, size int64, fill FillFunc) bool {
	name, err := encodeName(key)
	if err != nil || size < 0 || size > d.capacity {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.arc.Contains(key) || d.flights[key] != nil || d.queued[key] != nil {
		return false
	}
	if d.queue.Len() >= maxQueued {
		d.unqueue(d.queue.Front().Value.(*prefill).key)
	}
	d.queued[key] = d.queue.PushBack(&prefill{ctx: ctx, key: key, name: name, size: size, fill: fill})
	d.dispatch()
	return true
}

// SetPrefillLimit sets how many prefills may run at once (at least one;
// one until set). Running ones are not stopped when it shrinks.
func (d *Disk) SetPrefillLimit(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.prefillLimit = max(n, 1)
	d.dispatch()
}

// dispatch starts queued prefills, oldest first, while no Open waits for a
// fill and fewer than the limit run; d.mu is held.
func (d *Disk) dispatch() {
	for !d.closed && d.wanted == 0 && d.ahead < d.prefillLimit && d.queue.Len() > 0 {
		p := d.queue.Remove(d.queue.Front()).(*prefill)
		delete(d.queued, p.key)
		if d.arc.Contains(p.key) || d.flights[p.key] != nil {
			continue
		}
		d.start(p.ctx, p.key, p.name, p.size, p.fill, false)
	}
}

// unqueue drops the queued prefill of key, if any; d.mu is held.
func (d *Disk) unqueue(key string) {
	if el := d.queued[key]; el != nil {
		d.queue.Remove(el)
		delete(d.queued, key)
	}
}

// Contains reports whether key is a complete entry.
func (d *Disk) Contains(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.arc.Contains(key)
}

// Warm reports whether key is complete or being filled: a reader opening
// it now waits at most for the rest of a fill already under way.
func (d *Disk) Warm(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, filling := d.flights[key]
	return filling || d.arc.Contains(key)
}

// Remove deletes the complete entry key, if any. A running fill is not
// affected.
func (d *Disk) Remove(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.arc.Remove(key)
}

// Stats returns the counters and current sizes.
func (d *Disk) Stats() Stats {
	s := d.stats.stats()
	d.mu.Lock()
	s.Entries, s.Bytes, s.Filling = d.arc.Len(), d.arc.Bytes(), len(d.flights)
	s.Prefills, s.Queued = d.ahead, d.queue.Len()
	d.mu.Unlock()
	return s
}

// Close drops the queued prefills, cancels the running fills and waits for
// them to return. Their readers get the fills' errors; readers of complete
// entries keep working.
func (d *Disk) Close() error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		d.queue.Init()
		clear(d.queued)
		for _, fl := range d.flights {
			fl.cancel()
		}
	}
	d.mu.Unlock()
	d.running.Wait()
	return nil
}

// start registers and launches a fill of key, one an Open waits for
// (wanted) or a prefill; d.mu is held.
func (d *Disk) start(ctx context.Context, key, name string, size int64, fill FillFunc, wanted bool) (*flight, error) {
	f, err := os.CreateTemp(d.dir, name+".*.partial")
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	fl := &flight{key: key, name: name, partial: f.Name(), size: size, cancel: cancel, filling: true, wanted: wanted}
	fl.cond = sync.NewCond(&fl.mu)
	d.flights[key] = fl
	if wanted {
		d.wanted++
	} else {
		d.ahead++
	}
	d.stats.misses.Add(1)
	d.running.Add(1)
	go d.run(fctx, fl, f, fill)
	return fl, nil
}

func (d *Disk) run(ctx context.Context, fl *flight, f *os.File, fill FillFunc) {
	defer d.running.Done()
	defer fl.cancel()
	w := &flightWriter{ctx: ctx, fl: fl, f: f}
	err := fill(ctx, w)
	d.filled(fl)
	if err == nil && w.n != fl.size {
		err = fmt.Errorf("%w: fill wrote %d of %d bytes", ErrSizeMismatch, w.n, fl.size)
	}
	if err != nil {
		f.Close()
		d.mu.Lock()
		// Unregister and unlink together so the next Open starts afresh.
		delete(d.flights, fl.key)
		os.Remove(fl.partial)
		d.mu.Unlock()
		d.stats.fillErrors.Add(1)
		fl.finish(fmt.Errorf("cache: filling %s: %w", fl.key, err))
		return
	}
	fl.finish(nil) // readers get their last bytes now, not after the sync
	keep := max(fl.size, 1) <= d.capacity
	// Synced before the rename so that a complete entry found after a
	// power loss holds the verified bytes, not holes.
	if keep && f.Sync() != nil {
		keep = false
	}
	if f.Close() != nil {
		keep = false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.flights, fl.key)
	// Published even if Close is waiting: the bytes are verified, and Close
	// returns only after this.
	if keep && os.Rename(fl.partial, filepath.Join(d.dir, fl.name)) == nil {
		if !d.arc.Add(fl.key, diskEntry{fl.name, fl.size}, fl.size) {
			os.Remove(filepath.Join(d.dir, fl.name))
		}
		return
	}
	os.Remove(fl.partial)
}

// filled counts fl's fill as ended (what follows is file work: a sync, a
// rename) and starts the prefills that it held back.
func (d *Disk) filled(fl *flight) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fl.filling = false
	if fl.wanted {
		d.wanted--
	} else {
		d.ahead--
	}
	d.dispatch()
}

// flight is one running fill and the progress its readers wait on.
type flight struct {
	key, name, partial string
	size               int64
	cancel             context.CancelFunc
	// Guarded by Disk.mu: filling until fill returns; wanted once an
	// Open waits for it (see Disk).
	filling, wanted bool

	mu      sync.Mutex
	cond    *sync.Cond // broadcast on every write, on finish, on reader cancel
	written int64
	done    bool
	err     error
}

func (fl *flight) finish(err error) {
	fl.mu.Lock()
	fl.done, fl.err = true, err
	fl.cond.Broadcast()
	fl.mu.Unlock()
}

type flightWriter struct {
	ctx context.Context // the fill's own context, alive while the fill runs
	fl  *flight
	f   *os.File
	n   int64
}

func (w *flightWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	if int64(len(p)) > w.fl.size-w.n {
		return 0, fmt.Errorf("%w: fill writes past %d bytes", ErrSizeMismatch, w.fl.size)
	}
	n, err := w.f.Write(p)
	if n > 0 {
		w.n += int64(n)
		w.fl.mu.Lock()
		w.fl.written = w.n
		w.fl.cond.Broadcast()
		w.fl.mu.Unlock()
	}
	return n, err
}

// flightReader reads a growing partial file up to what the fill published.
type flightReader struct {
	fl     *flight
	f      *os.File
	pos    int64
	stop   func() bool
	ctxErr error // set under fl.mu when the Open context ends
	closed bool
}

func (r *flightReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	fl := r.fl
	fl.mu.Lock()
	var limit int64
	for {
		if r.ctxErr != nil {
			fl.mu.Unlock()
			return 0, r.ctxErr
		}
		if fl.done && fl.err != nil {
			fl.mu.Unlock()
			return 0, fl.err
		}
		limit = fl.written
		if !fl.done {
			limit = min(limit, fl.size-1) // the last byte waits for the verdict
		}
		if r.pos < limit {
			break
		}
		if fl.done {
			fl.mu.Unlock()
			return 0, io.EOF
		}
		fl.cond.Wait()
	}
	fl.mu.Unlock()
	n, err := r.f.ReadAt(p[:min(int64(len(p)), limit-r.pos)], r.pos)
	r.pos += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (r *flightReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.stop()
	return r.f.Close()
}

type fileReader struct {
	*io.SectionReader
	f *os.File
}

func (r *fileReader) Close() error { return r.f.Close() }

// File names: bytes outside [A-Za-z0-9_-] are written as %XX, so names never
// contain '.', cannot collide with "<name>.<rand>.partial" and decode back to
// the key on restart. "sha256:ab.." becomes "sha256%3Aab..".
const maxNameLen = 200

func encodeName(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	var b strings.Builder
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(key); i++ {
		c := key[i]
		if isPlain(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	if b.Len() > maxNameLen {
		return "", fmt.Errorf("%w: %d bytes long", ErrInvalidKey, len(key))
	}
	return b.String(), nil
}

func decodeName(name string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case isPlain(c):
			b.WriteByte(c)
		case c == '%' && i+2 < len(name) && isUpperHex(name[i+1]) && isUpperHex(name[i+2]):
			b.WriteByte(unhex(name[i+1])<<4 | unhex(name[i+2]))
			i += 2
		default:
			return "", false
		}
	}
	key := b.String()
	if enc, err := encodeName(key); err != nil || enc != name {
		return "", false // not canonical: not ours
	}
	return key, true
}

func isPlain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

func isUpperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}
