package parallel

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

func TestForCallsEachIndexOnce(t *testing.T) {
	for _, conc := range []int{0, 1, 3, 100} {
		var seen sync.Map
		var calls, inFlight, most atomic.Int64
		got := For(context.Background(), 50, conc, func(i int) {
			calls.Add(1)
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if _, dup := seen.LoadOrStore(i, true); dup {
				t.Errorf("index %d called twice", i)
			}
			inFlight.Add(-1)
		})
		if got != 50 || calls.Load() != 50 {
			t.Errorf("conc %d: %d handed out, %d calls; want 50", conc, got, calls.Load())
		}
		if m := most.Load(); m > int64(max(conc, 1)) {
			t.Errorf("conc %d: %d calls at once", conc, m)
		}
	}
}

func TestForStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	got := For(ctx, 1000, 1, func(i int) {
		if calls.Add(1) == 10 {
			cancel()
		}
	})
	if got != 10 || calls.Load() != 10 {
		t.Fatalf("%d handed out, %d calls after cancelling at the 10th; want 10", got, calls.Load())
	}
}
