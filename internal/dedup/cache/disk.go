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
	"syscall"
	"time"

	"github.com/cairn-registry/cairn/internal/arc"
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

	// errNoReaders stops a fill that stepped aside once no reader is left
	// to stream to: without its file there is nothing to keep either.
	errNoReaders = errors.New("cache: stepped aside and no reader left")
)

// Reasons a Disk stepped aside for a fill (WriteFailure.Reason).
const (
	ReasonDeclined   = "declined"   // the entry would have eaten into the volume's free margin
	ReasonNoSpace    = "no_space"   // ENOSPC, EDQUOT
	ReasonReadOnly   = "read_only"  // EROFS
	ReasonPermission = "permission" // EACCES, EPERM
	ReasonIO         = "io"         // any other create, write, sync, close or rename error
)

// WriteFailure is a fill whose cached copy was declined, abandoned or not
// kept. Its readers were not affected: they got, or still get, every byte.
type WriteFailure struct {
	Key    string
	Reason string // Reason*
	Err    error  // the cause; nil when declined
}

// reasonOf classifies a create, write or sync error.
func reasonOf(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return ReasonNoSpace
	case errors.Is(err, syscall.EROFS):
		return ReasonReadOnly
	case errors.Is(err, os.ErrPermission):
		return ReasonPermission
	}
	return ReasonIO
}

// The free-space margin: a new entry is admitted only if the volume keeps
// min(1/marginDiv of its size, maxMargin) free after it and the fills under
// way, so the cache never fills the volume it shares (by default the
// registry's own root) and never stays the reason it is full.
const (
	marginDiv = 10
	maxMargin = 1 << 30
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
	// Disk: fills given no file, to keep the volume's margin free, and
	// fills whose file failed (create, write, sync, close, rename); both
	// streamed to their readers without it.
	Declined      uint64
	WriteFailures uint64
	Entries       int
	Bytes         int64
	Filling       int // fills running now
	Prefills      int // Disk: fills running now that no Open waits for
	Queued        int // Disk: prefills waiting to start
	Yielding      int // Disk: running prefills paused for a fill an Open waits for
}

type counters struct {
	hits, misses, shared, skipped, evictions, fillErrors atomic.Uint64
	declined, writeFailures                              atomic.Uint64
}

func (c *counters) stats() Stats {
	return Stats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Shared: c.shared.Load(),
		Skipped: c.skipped.Load(), Evictions: c.evictions.Load(), FillErrors: c.fillErrors.Load(),
		Declined: c.declined.Load(), WriteFailures: c.writeFailures.Load(),
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
//
//   - An Open that needs a fill starts it at once, whatever prefills are
//     queued or running.
//
//   - Prefill queues; a queued prefill starts only while no running fill
//     has an Open waiting for it, and while fewer than the prefill limit
//     (SetPrefillLimit) of prefills run.
//
//   - An Open of a key whose prefill is queued takes it out of the queue
//     and starts the fill itself; an Open that joins a running prefill
//     waits for what is left of it, and from then on that fill is one an
//     Open waits for.
//
//   - A running prefill pauses at its next write while a fill an Open
//     waits for runs (its producer stalls behind it, so the CPU goes to
//     the Open's fill), and goes on when none does or an Open joins it.
//
// A running fill is never stopped, so an Open shares the machine at most
// with what the prefills that were running when it came do before their
// next write.
//
// The cache serves or steps aside; it never cuts a read. A fill is admitted
// to a file only if the volume keeps its free margin after it (one Statfs
// per admission; complete entries are evicted to make room when that is
// enough, else the fill is declined). A fill declined, or whose file cannot
// be created, streams to its Open's reader alone from memory (a prefill is
// dropped). A fill whose file fails mid-way (ENOSPC, EROFS, EIO, ...) stops
// writing it: the partial file is removed, and its readers get what reached
// the file from their descriptors and the rest from the fill, which then
// goes at the pace of the slowest of them; an Open that comes later starts
// its own fill. Each such fill is reported once (OnWriteFailure).
//
// Disk is safe for concurrent use.
type Disk struct {
	dir      string
	capacity int64
	stats    counters
	// onFailure hears of each WriteFailure; statfs and create are the
	// volume's, replaced in tests.
	onFailure atomic.Pointer[func(WriteFailure)]
	statfs    func(dir string) (avail, total int64, err error)
	create    func(dir, pattern string) (file, error)

	mu      sync.Mutex // guards everything below and all renames/unlinks in dir
	arc     *arc.Cache[diskEntry]
	flights map[string]*flight
	// detached are the running fills without a file (stepped aside): not
	// shared, but cancelled by Close.
	detached map[*flight]struct{}
	closed   bool
	running  sync.WaitGroup

	// Prefills: queue holds the waiting ones, oldest first (*prefill),
	// queued indexes it by key. wanted counts the running fills an Open
	// waits for, ahead the running ones none does; at most prefillLimit
	// of those. A queue of its own, not task's: an Open takes a queued
	// prefill out of it, and a running one pauses for an Open's fill.
	queue        *list.List
	queued       map[string]*list.Element
	wanted       int
	ahead        int
	prefillLimit int
	// idle is broadcast when wanted falls, a prefill becomes wanted, or
	// Disk closes: prefills paused in yield look again. yielding counts
	// them.
	idle     *sync.Cond
	yielding int
}

// file is what a fill writes to: an *os.File but in tests.
type file interface {
	io.Writer
	Name() string
	Sync() error
	Close() error
}

func createTemp(dir, pattern string) (file, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err // not a non-nil interface holding a nil *os.File
	}
	return f, nil
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
		detached: make(map[*flight]struct{}), statfs: volumeSpace, create: createTemp,
		queue: list.New(), queued: make(map[string]*list.Element), prefillLimit: 1,
	}
	d.idle = sync.NewCond(&d.mu)
	d.arc = arc.New(d.capacity, func(_ string, e diskEntry) {
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
	var launch func()
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
			d.idle.Broadcast()
		}
	} else {
		// A queued prefill of key is this fill, started now.
		d.unqueue(key)
		fl, launch = d.start(ctx, key, name, size, fill, true)
	}
	// Each reader has its own descriptor, so renames and unlinks of the
	// path never disturb it. A fill without a file hands its bytes over
	// in memory.
	var f *os.File
	if fl.partial != "" {
		if f, err = os.Open(fl.partial); err != nil {
			if launch != nil {
				launch() // registered and counted: it runs, for the cache
			}
			return nil, false, fmt.Errorf("cache: %w", err)
		}
	}
	r := &flightReader{fl: fl, f: f, pos: offset}
	// Registered before the fill starts: one that stepped aside stops
	// when it has no reader.
	fl.mu.Lock()
	fl.readers[r] = struct{}{}
	fl.mu.Unlock()
	r.stop = context.AfterFunc(ctx, func() {
		fl.mu.Lock()
		r.ctxErr = context.Cause(ctx)
		delete(fl.readers, r)
		fl.cond.Broadcast()
		fl.mu.Unlock()
	})
	if launch != nil {
		launch()
	}
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
		if _, launch := d.start(p.ctx, p.key, p.name, p.size, p.fill, false); launch != nil {
			launch()
		}
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
	s.Entries, s.Bytes, s.Filling = d.arc.Len(), d.arc.Bytes(), len(d.flights)+len(d.detached)
	s.Prefills, s.Queued, s.Yielding = d.ahead, d.queue.Len(), d.yielding
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
		for fl := range d.detached {
			fl.cancel()
		}
		d.idle.Broadcast()
	}
	d.mu.Unlock()
	d.running.Wait()
	return nil
}

// start registers a fill of key, one an Open waits for (wanted) or a
// prefill, and returns it with the function that launches it (the caller
// first attaches its reader); d.mu is held. A fill the volume does not
// admit, or whose file cannot be created, has no file: it is not shared,
// and streams to its Open's reader from memory; a prefill without one
// would stream to nobody, so it is not started (nil).
func (d *Disk) start(ctx context.Context, key, name string, size int64, fill FillFunc, wanted bool) (*flight, func()) {
	fl := &flight{key: key, name: name, size: size, filling: true, wanted: wanted, readers: make(map[*flightReader]struct{})}
	fl.cond = sync.NewCond(&fl.mu)
	var f file
	var failure *WriteFailure
	if !d.admit(size) {
		d.stats.declined.Add(1)
		failure = &WriteFailure{Key: key, Reason: ReasonDeclined}
	} else if nf, err := d.create(d.dir, name+".*.partial"); err != nil {
		d.stats.writeFailures.Add(1)
		failure = &WriteFailure{Key: key, Reason: reasonOf(err), Err: fmt.Errorf("cache: creating the entry of %s: %w", key, err)}
	} else {
		f, fl.partial = nf, nf.Name()
	}
	if failure != nil {
		if !wanted {
			// Reported off d.mu, as run does for an Open's fill.
			go d.report(*failure)
			return nil, nil
		}
		fl.aside = true
		d.detached[fl] = struct{}{}
	} else {
		d.flights[key] = fl
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	fl.cancel = cancel
	if wanted {
		d.wanted++
	} else {
		d.ahead++
	}
	d.stats.misses.Add(1)
	return fl, func() {
		d.running.Add(1)
		go d.run(fctx, fl, f, failure, fill)
	}
}

// admit reports whether a new fill of size bytes may write a file: the
// volume must keep its margin free after it and what the fills under way
// have still to write. Complete entries are evicted, least valuable first,
// when that makes enough room; when even all of them would not, none is
// and the fill is declined. One Statfs; d.mu is held.
func (d *Disk) admit(size int64) bool {
	avail, total, err := d.statfs(d.dir)
	if err != nil {
		return true // unknown here: a failing write still steps aside
	}
	need := size + min(total/marginDiv, maxMargin) + d.reserved() - avail
	if need <= 0 {
		return true
	}
	keys := d.arc.Keys() // most valuable first
	var freed int64
	n := len(keys)
	for n > 0 && freed < need {
		n--
		e, _ := d.arc.Peek(keys[n])
		freed += e.size
	}
	if freed < need {
		return false
	}
	for _, k := range keys[n:] {
		d.arc.Remove(k)
	}
	return true
}

// reserved is what the fills with a file have still to write; d.mu is held.
func (d *Disk) reserved() int64 {
	var n int64
	for _, fl := range d.flights {
		fl.mu.Lock()
		if !fl.aside {
			n += fl.size - fl.written
		}
		fl.mu.Unlock()
	}
	return n
}

// OnWriteFailure sets the function told of each WriteFailure, once per
// fill and never under a lock of the Disk.
func (d *Disk) OnWriteFailure(f func(WriteFailure)) { d.onFailure.Store(&f) }

func (d *Disk) report(f WriteFailure) {
	if h := d.onFailure.Load(); h != nil && *h != nil {
		(*h)(f)
	}
}

// unregister forgets fl as running; d.mu is held. A fill that stepped aside
// may have been followed by a new one of its key: that one stays.
func (d *Disk) unregister(fl *flight) {
	if d.flights[fl.key] == fl {
		delete(d.flights, fl.key)
	}
	delete(d.detached, fl)
}

func (d *Disk) run(ctx context.Context, fl *flight, f file, failure *WriteFailure, fill FillFunc) {
	defer d.running.Done()
	defer fl.cancel()
	if failure != nil {
		d.report(*failure)
	}
	// A writer waiting for readers (stepped aside) wakes on Close.
	defer context.AfterFunc(ctx, func() {
		fl.mu.Lock()
		fl.cond.Broadcast()
		fl.mu.Unlock()
	})()
	w := &flightWriter{ctx: ctx, d: d, fl: fl, f: f}
	err := fill(ctx, w)
	d.filled(fl)
	if err == nil && w.n != fl.size {
		err = fmt.Errorf("%w: fill wrote %d of %d bytes", ErrSizeMismatch, w.n, fl.size)
	}
	if err != nil {
		if w.f != nil {
			w.f.Close()
		}
		d.mu.Lock()
		// Unregister and unlink together so the next Open starts afresh.
		d.unregister(fl)
		if w.f != nil {
			os.Remove(fl.partial)
		}
		d.mu.Unlock()
		if !errors.Is(err, errNoReaders) {
			d.stats.fillErrors.Add(1)
		}
		fl.finish(fmt.Errorf("cache: filling %s: %w", fl.key, err))
		return
	}
	fl.finish(nil) // readers get their last bytes now, not after the sync
	if w.f == nil {
		// Stepped aside: the readers had everything; there is nothing to keep.
		d.mu.Lock()
		d.unregister(fl)
		d.mu.Unlock()
		return
	}
	keep := max(fl.size, 1) <= d.capacity
	var ferr error
	// Synced before the rename so that a complete entry found after a
	// power loss holds the verified bytes, not holes.
	if keep {
		if err := w.f.Sync(); err != nil {
			keep, ferr = false, fmt.Errorf("cache: syncing the entry of %s: %w", fl.key, err)
		}
	}
	if err := w.f.Close(); err != nil && ferr == nil {
		keep, ferr = false, fmt.Errorf("cache: closing the entry of %s: %w", fl.key, err)
	}
	d.mu.Lock()
	d.unregister(fl)
	// Published even if Close is waiting: the bytes are verified, and Close
	// returns only after this.
	if keep {
		err := os.Rename(fl.partial, filepath.Join(d.dir, fl.name))
		if err == nil {
			if !d.arc.Add(fl.key, diskEntry{fl.name, fl.size}, fl.size) {
				os.Remove(filepath.Join(d.dir, fl.name))
			}
			d.mu.Unlock()
			return
		}
		ferr = fmt.Errorf("cache: publishing the entry of %s: %w", fl.key, err)
	}
	os.Remove(fl.partial)
	d.mu.Unlock()
	if ferr != nil {
		d.stats.writeFailures.Add(1)
		d.report(WriteFailure{Key: fl.key, Reason: reasonOf(ferr), Err: ferr})
	}
}

// filled counts fl's fill as ended (what follows is file work: a sync, a
// rename) and starts the prefills that it held back.
func (d *Disk) filled(fl *flight) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fl.filling = false
	if fl.wanted {
		d.wanted--
		d.idle.Broadcast()
	} else {
		d.ahead--
	}
	d.dispatch()
}

// yield pauses a prefill's fill while a fill an Open waits for runs, until
// an Open joins it, Disk closes or ctx ends.
func (d *Disk) yield(ctx context.Context, fl *flight) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if fl.wanted || d.wanted == 0 || d.closed {
		return
	}
	stop := context.AfterFunc(ctx, func() {
		d.mu.Lock()
		d.idle.Broadcast()
		d.mu.Unlock()
	})
	defer stop()
	d.yielding++
	for !fl.wanted && d.wanted > 0 && !d.closed && ctx.Err() == nil {
		d.idle.Wait()
	}
	d.yielding--
}

// flight is one running fill and the progress its readers wait on.
type flight struct {
	key, name, partial string // partial is "" for a fill without a file
	size               int64
	cancel             context.CancelFunc
	// Guarded by Disk.mu: filling until fill returns; wanted once an
	// Open waits for it (see Disk).
	filling, wanted bool

	mu      sync.Mutex
	cond    *sync.Cond // broadcast on every write, on finish, on reader progress or exit
	written int64      // bytes published to readers
	done    bool
	err     error
	readers map[*flightReader]struct{} // those whose context did not end and that are not closed
	// Once the cache stepped aside (aside), bytes below fileEnd are read
	// from the file, and those from bufStart on from buf, which holds the
	// fill's last write until every reader has read it.
	aside    bool
	fileEnd  int64
	bufStart int64
	buf      []byte
}

func (fl *flight) finish(err error) {
	fl.mu.Lock()
	fl.done, fl.err = true, err
	fl.cond.Broadcast()
	fl.mu.Unlock()
}

// readersCaughtUp reports whether every reader has read all that was
// published; fl.mu is held.
func (fl *flight) readersCaughtUp() bool {
	for r := range fl.readers {
		if r.pos < fl.written {
			return false
		}
	}
	return true
}

type flightWriter struct {
	ctx context.Context // the fill's own context, alive while the fill runs
	d   *Disk
	fl  *flight
	f   file // nil once the cache stepped aside
	n   int64
}

func (w *flightWriter) Write(p []byte) (int, error) {
	w.d.yield(w.ctx, w.fl)
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	if int64(len(p)) > w.fl.size-w.n {
		return 0, fmt.Errorf("%w: fill writes past %d bytes", ErrSizeMismatch, w.fl.size)
	}
	if w.f == nil {
		return w.handOver(p)
	}
	n, err := w.f.Write(p)
	if n > 0 {
		w.n += int64(n)
		w.fl.mu.Lock()
		w.fl.written = w.n
		w.fl.cond.Broadcast()
		w.fl.mu.Unlock()
	}
	if err == nil && n == len(p) {
		return n, nil
	}
	if err == nil {
		err = io.ErrShortWrite
	}
	w.stepAside(err)
	k, err := w.handOver(p[n:])
	return n + k, err
}

// stepAside abandons the cache copy after err: the partial file is closed
// and removed (readers keep their descriptors of it), no new Open joins,
// and from here the fill hands its bytes to its readers in memory.
func (w *flightWriter) stepAside(err error) {
	fl, d := w.fl, w.d
	w.f.Close()
	w.f = nil
	d.mu.Lock()
	if d.flights[fl.key] == fl {
		delete(d.flights, fl.key)
		d.detached[fl] = struct{}{}
	}
	os.Remove(fl.partial)
	d.mu.Unlock()
	fl.mu.Lock()
	fl.aside, fl.fileEnd, fl.bufStart = true, w.n, w.n
	fl.mu.Unlock()
	d.stats.writeFailures.Add(1)
	d.report(WriteFailure{Key: fl.key, Reason: reasonOf(err), Err: fmt.Errorf("cache: writing the entry of %s: %w", fl.key, err)})
}

// handOver publishes p to the readers from memory once each of them has
// read what was published before, so that buf can be reused: a fill that
// stepped aside goes at its slowest reader's pace. With no reader left it
// fails: nobody is streamed to and nothing is kept.
func (w *flightWriter) handOver(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	fl := w.fl
	fl.mu.Lock()
	defer fl.mu.Unlock()
	for {
		if err := w.ctx.Err(); err != nil {
			return 0, err
		}
		if len(fl.readers) == 0 {
			return 0, errNoReaders
		}
		if fl.readersCaughtUp() {
			break
		}
		fl.cond.Wait()
	}
	fl.buf = append(fl.buf[:0], p...)
	fl.bufStart = fl.written
	fl.written += int64(len(p))
	w.n += int64(len(p))
	fl.cond.Broadcast()
	return len(p), nil
}

// flightReader reads a growing partial file, or the fill's hand-over
// buffer, up to what the fill published.
type flightReader struct {
	fl     *flight
	f      *os.File // nil for a fill without a file
	pos    int64    // guarded by fl.mu
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
	if fl.aside && r.pos >= fl.fileEnd {
		// The fill keeps buf until every reader is past it, so it still
		// holds r.pos.
		n := copy(p, fl.buf[r.pos-fl.bufStart:limit-fl.bufStart])
		r.pos += int64(n)
		fl.cond.Broadcast()
		fl.mu.Unlock()
		return n, nil
	}
	if fl.aside {
		limit = min(limit, fl.fileEnd)
	}
	pos := r.pos
	fl.mu.Unlock()
	n, err := r.f.ReadAt(p[:min(int64(len(p)), limit-pos)], pos)
	fl.mu.Lock()
	r.pos += int64(n)
	if fl.aside {
		fl.cond.Broadcast() // a fill handing over may wait for this reader
	}
	fl.mu.Unlock()
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
	r.fl.mu.Lock()
	delete(r.fl.readers, r)
	r.fl.cond.Broadcast()
	r.fl.mu.Unlock()
	if r.f == nil {
		return nil
	}
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
