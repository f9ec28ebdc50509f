package cache

import (
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
	Misses     uint64 // started a fill (including Prefill)
	Shared     uint64 // Disk: joined a fill already running
	Skipped    uint64 // Memory: Fill ignored an entry too large to keep
	Evictions  uint64 // complete entries dropped to make room
	FillErrors uint64 // fills that failed or wrote the wrong size
	Entries    int
	Bytes      int64
	Filling    int // fills running now
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
// Lifecycle of an entry: the first Open (or Prefill) of an absent key starts
// one fill writing <name>.<rand>.partial; every Open of that key while it runs
// reads the same file as it grows, and the last byte is released only after
// the fill returned nil, so a fill that fails its check never yields a
// complete body. On success the file is synced and renamed to <name>, which
// makes it a complete entry, admitted to an ARC bounded in bytes; on failure
// it is removed. Only complete entries survive a restart; a crash leaves
// .partial files, which OpenDisk deletes. Eviction unlinks the file; readers
// that already have it open keep reading.
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
	d := &Disk{dir: dir, capacity: max(capacity, 0), flights: make(map[string]*flight)}
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
	} else {
		if fl, err = d.start(ctx, key, name, size, fill); err != nil {
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

// Prefill starts filling key in the background unless it is complete, being
// filled, or too large to keep (prefilling what cannot be kept is wasted
// work). It returns at once; ctx supplies values, not cancellation.
func (d *Disk) Prefill(ctx context.Context, key string, size int64, fill FillFunc) {
	name, err := encodeName(key)
	if err != nil || size < 0 || size > d.capacity {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.arc.Contains(key) || d.flights[key] != nil {
		return
	}
	d.start(ctx, key, name, size, fill)
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
	d.mu.Unlock()
	return s
}

// Close cancels the running fills and waits for them to return. Their
// readers get the fills' errors; readers of complete entries keep working.
func (d *Disk) Close() error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		for _, fl := range d.flights {
			fl.cancel()
		}
	}
	d.mu.Unlock()
	d.running.Wait()
	return nil
}

// start registers and launches a fill of key; d.mu is held.
func (d *Disk) start(ctx context.Context, key, name string, size int64, fill FillFunc) (*flight, error) {
	f, err := os.CreateTemp(d.dir, name+".*.partial")
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	fl := &flight{key: key, name: name, partial: f.Name(), size: size, cancel: cancel}
	fl.cond = sync.NewCond(&fl.mu)
	d.flights[key] = fl
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

// flight is one running fill and the progress its readers wait on.
type flight struct {
	key, name, partial string
	size               int64
	cancel             context.CancelFunc

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
