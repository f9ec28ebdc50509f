package webui

import (
	"sync"
	"time"
)

// History keeps the storage story over time, in memory and bounded: a
// sample of what dedup stores, taken periodically, and each GC run's
// result. A restart starts it afresh (the current figures are computed on
// every page view).
type History struct {
	mu      sync.Mutex
	samples []Sample
	runs    []GCRun
}

// Sample is the storage at one time.
type Sample struct {
	At      time.Time
	Logical int64 // bytes without dedup
	Stored  int64
}

// GCRun is one garbage collection's result.
type GCRun struct {
	At    time.Time
	Freed int64 // bytes
	Blobs int64
	Error bool
}

// maxHistory bounds each series.
const maxHistory = 500

// AddSample records a storage sample.
func (h *History) AddSample(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = appendBounded(h.samples, s)
}

// AddGCRun records a GC run.
func (h *History) AddGCRun(r GCRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs = appendBounded(h.runs, r)
}

func appendBounded[T any](s []T, v T) []T {
	if len(s) >= maxHistory {
		s = append(s[:0], s[len(s)-maxHistory+1:]...)
	}
	return append(s, v)
}

func (h *History) snapshot() ([]Sample, []GCRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sample(nil), h.samples...), append([]GCRun(nil), h.runs...)
}
