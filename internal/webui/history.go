package webui

import (
	"encoding/json"
	"slices"
	"sync"
	"time"
)

// History keeps the storage story over time, bounded: samples of what
// dedup stores, taken when the figures change (see Figures), and each GC
// run's result. Figures keeps it in storage (layout.UIHistory) so that a
// restart continues it.
type History struct {
	mu      sync.Mutex
	samples []Sample
	runs    []GCRun
	// changed, when set, is told of each change (gcRun: a GC run ended).
	changed func(gcRun bool)
}

// Sample is the storage at one time.
type Sample struct {
	At      time.Time `json:"at"`
	Logical int64     `json:"logical"` // bytes without dedup
	Stored  int64     `json:"stored"`
}

// GCRun is one garbage collection's result.
type GCRun struct {
	At    time.Time `json:"at"`
	Freed int64     `json:"freed"` // bytes: gc.Report's Deleted.BytesFreed, packs included
	Blobs int64     `json:"blobs"`
	Error bool      `json:"error,omitempty"`
}

// Bounds of the series. Samples are thinned rather than cut when full
// (every other one of the older half goes), so the plot keeps its whole
// span at a coarser step; GC runs keep the latest.
const (
	maxSamples = 500
	maxRuns    = 200
)

// AddSample records a storage sample.
func (h *History) AddSample(s Sample) {
	h.mu.Lock()
	h.samples = appendThinned(h.samples, s)
	changed := h.changed
	h.mu.Unlock()
	if changed != nil {
		changed(false)
	}
}

// AddGCRun records a GC run.
func (h *History) AddGCRun(r GCRun) {
	h.mu.Lock()
	h.runs = appendBounded(h.runs, r, maxRuns)
	changed := h.changed
	h.mu.Unlock()
	if changed != nil {
		changed(true)
	}
}

// lastSample returns the latest sample.
func (h *History) lastSample() (Sample, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) == 0 {
		return Sample{}, false
	}
	return h.samples[len(h.samples)-1], true
}

func appendBounded[T any](s []T, v T, limit int) []T {
	if len(s) >= limit {
		s = append(s[:0], s[len(s)-limit+1:]...)
	}
	return append(s, v)
}

func appendThinned(s []Sample, v Sample) []Sample {
	if len(s) >= maxSamples {
		half := len(s) / 2
		kept := s[:0]
		for i, x := range s {
			if i >= half || i%2 == 0 {
				kept = append(kept, x)
			}
		}
		s = kept
	}
	return append(s, v)
}

func (h *History) snapshot() ([]Sample, []GCRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sample(nil), h.samples...), append([]GCRun(nil), h.runs...)
}

// historyFile is the stored form of a History (layout.UIHistory).
type historyFile struct {
	Version int      `json:"version"`
	Samples []Sample `json:"samples"`
	GCRuns  []GCRun  `json:"gcRuns"`
}

func (h *History) marshal() ([]byte, error) {
	samples, runs := h.snapshot()
	if samples == nil {
		samples = []Sample{}
	}
	if runs == nil {
		runs = []GCRun{}
	}
	return json.Marshal(historyFile{Version: 1, Samples: samples, GCRuns: runs})
}

// restore puts what an earlier process kept before what this one has
// recorded already, in time order and within the bounds.
func (h *History) restore(b []byte) error {
	var f historyFile
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	samples := append(f.Samples, h.samples...)
	slices.SortStableFunc(samples, func(a, b Sample) int { return a.At.Compare(b.At) })
	h.samples = nil
	for _, s := range samples {
		h.samples = appendThinned(h.samples, s)
	}
	runs := append(f.GCRuns, h.runs...)
	slices.SortStableFunc(runs, func(a, b GCRun) int { return a.At.Compare(b.At) })
	if len(runs) > maxRuns {
		runs = runs[len(runs)-maxRuns:]
	}
	h.runs = runs
	return nil
}
