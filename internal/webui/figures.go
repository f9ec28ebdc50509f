package webui

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Figures keeps the storage figures the page shows, and the History they
// make over time.
//
// Lifecycle: until Run has read the stored history and measured once, the
// page says "measuring…" rather than show figures nobody measured. Then
// Run measures again after every change it is told of (a layer
// deduplicated: LayerDeduplicated; a GC run ended: History.AddGCRun), at
// most once per MinInterval however many changes come, and every Period
// without any. A page view waits a little for a measurement of the changes
// known when it began, and says "refreshing…" if that is not done by then.
// Each measurement that moved the figures becomes a History sample; the
// history is written to storage (layout.UIHistory) at most once a minute,
// after each GC run, and when Run ends.
type Figures struct {
	history  *History
	store    HistoryStore
	readOnly bool
	log      *slog.Logger
	min      time.Duration
	period   time.Duration
	wait     time.Duration

	poke chan struct{} // a change to measure (buffered, one)

	mu       sync.Mutex
	cur      Storage
	measured bool          // cur holds a measurement
	failed   string        // the last measurement's error
	told     uint64        // changes told
	done     uint64        // changes told before the measurement of cur began
	fresh    chan struct{} // closed, and replaced, by each measurement
	dirty    bool          // history changed since written
	saveNow  bool          // a GC run to write
	savedAt  time.Time
}

// HistoryStore keeps the history between runs: the storage (a
// driver.Driver).
type HistoryStore interface {
	GetContent(ctx context.Context, path string) ([]byte, error)
	PutContent(ctx context.Context, path string, content []byte) error
}

// FiguresOptions configure NewFigures.
type FiguresOptions struct {
	History *History
	// Store keeps the history (nil: memory only).
	Store HistoryStore
	// ReadOnly reads the stored history but never writes it (storage in
	// read-only maintenance).
	ReadOnly bool
	Log      *slog.Logger
	// MinInterval spaces measurements after changes (default 3 s): a
	// measurement reads every recipe.
	MinInterval time.Duration
	// Period is the longest time without a measurement (default 10 min).
	Period time.Duration
	// Wait is how long a page view waits for a measurement in progress
	// (default 4 s).
	Wait time.Duration
}

// NewFigures returns the figures of opts.History, which it is told the GC
// runs of.
func NewFigures(opts FiguresOptions) *Figures {
	f := &Figures{history: opts.History, store: opts.Store, readOnly: opts.ReadOnly, log: opts.Log,
		min: opts.MinInterval, period: opts.Period, wait: opts.Wait,
		poke: make(chan struct{}, 1), fresh: make(chan struct{})}
	if f.history == nil {
		f.history = &History{}
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.min <= 0 {
		f.min = 3 * time.Second
	}
	if f.period <= 0 {
		f.period = 10 * time.Minute
	}
	if f.wait <= 0 {
		f.wait = 4 * time.Second
	}
	f.history.mu.Lock()
	f.history.changed = f.historyChanged
	f.history.mu.Unlock()
	return f
}

// History returns the history the figures make.
func (f *Figures) History() *History { return f.history }

// Changed says the figures may have moved: they are measured again soon.
func (f *Figures) Changed() {
	f.mu.Lock()
	f.told++
	f.mu.Unlock()
	select {
	case f.poke <- struct{}{}:
	default:
	}
}

// LayerDeduplicated is Changed (dedup.LayerEvents).
func (f *Figures) LayerDeduplicated(digest.Digest) { f.Changed() }

// historyChanged is the History's hook: a GC run is a change to measure
// and to write at once; a sample is written within the minute.
func (f *Figures) historyChanged(gcRun bool) {
	f.mu.Lock()
	f.dirty = true
	f.saveNow = f.saveNow || gcRun
	f.mu.Unlock()
	if gcRun {
		f.Changed()
	}
}

// Current returns the figures for a page view (Options.Storage).
func (f *Figures) Current(ctx context.Context) (Storage, error) {
	timer := time.NewTimer(f.wait)
	defer timer.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	want := f.told
	for waiting := true; waiting && (!f.measured && f.failed == "" || f.done < want); {
		fresh := f.fresh
		f.mu.Unlock()
		select {
		case <-fresh:
		case <-timer.C:
			waiting = false
		case <-ctx.Done():
			waiting = false
		}
		f.mu.Lock()
	}
	st := f.cur
	st.Measuring = !f.measured && f.failed == ""
	st.Refreshing = f.measured && f.done < want
	st.Error = f.failed
	return st, nil
}

// Run loads the stored history, then measures with measure until ctx
// ends, and writes the history a last time.
func (f *Figures) Run(ctx context.Context, measure func(context.Context) (Storage, error)) {
	f.load(ctx)
	periodic := time.NewTimer(0)
	defer periodic.Stop()
	minute := time.NewTicker(time.Minute)
	defer minute.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			f.save(context.WithoutCancel(ctx), true)
			return
		case <-minute.C:
			f.save(ctx, false)
			continue
		case <-periodic.C:
		case <-f.poke:
			// At most one measurement per MinInterval: the changes
			// told meanwhile are all in the next one.
			if d := f.min - time.Since(last); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					continue
				case <-t.C:
				}
			}
		}
		last = time.Now()
		f.measure(ctx, measure)
		f.save(ctx, false)
		periodic.Reset(f.period)
	}
}

// measure takes one measurement and records it.
func (f *Figures) measure(ctx context.Context, measure func(context.Context) (Storage, error)) {
	f.mu.Lock()
	told := f.told
	f.mu.Unlock()
	st, err := measure(ctx)
	if ctx.Err() != nil {
		return
	}
	st.At = time.Now().UTC()
	if err != nil {
		f.log.Warn("ui: measuring the storage figures", "err", err)
	} else if st.Dedup {
		// A sample when the figures moved, or after half a Period of
		// the same: the plot steps where they changed and still reaches
		// now. Recorded before the figures are published, so that a
		// page showing them has it.
		if prev, ok := f.history.lastSample(); !ok || prev.Logical != st.Logical || prev.Stored != st.Stored || st.At.Sub(prev.At) >= f.period/2 {
			f.history.AddSample(Sample{At: st.At, Logical: st.Logical, Stored: st.Stored})
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = ""
	if err == nil {
		f.cur, f.measured = st, true
	} else {
		f.failed = err.Error()
	}
	f.done = max(f.done, told)
	close(f.fresh)
	f.fresh = make(chan struct{})
}

// load reads the stored history; a missing one is a first start, an
// unreadable one is logged and started afresh.
func (f *Figures) load(ctx context.Context) {
	if f.store == nil {
		return
	}
	b, err := f.store.GetContent(ctx, layout.UIHistory)
	if errors.Is(err, driver.ErrNotFound) {
		return
	}
	if err == nil {
		err = f.history.restore(b)
	}
	if err != nil && ctx.Err() == nil {
		f.log.Warn("ui: the storage history could not be read; it starts afresh", "path", layout.UIHistory, "err", err)
	}
}

// save writes the history if it changed: at once after a GC run or with
// force, else at most once a minute.
func (f *Figures) save(ctx context.Context, force bool) {
	if f.store == nil || f.readOnly {
		return
	}
	f.mu.Lock()
	due := f.dirty && (force || f.saveNow || time.Since(f.savedAt) >= time.Minute)
	if due {
		f.dirty, f.saveNow, f.savedAt = false, false, time.Now()
	}
	f.mu.Unlock()
	if !due {
		return
	}
	b, err := f.history.marshal()
	if err == nil {
		err = f.store.PutContent(ctx, layout.UIHistory, b)
	}
	if err != nil {
		if ctx.Err() == nil {
			f.log.Warn("ui: writing the storage history", "path", layout.UIHistory, "err", err)
		}
		f.mu.Lock()
		f.dirty = true // again within the minute
		f.mu.Unlock()
	}
}
