package repeat

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		stop := Report(time.Second, func(int64) { n.Add(1) }, n.Load)
		time.Sleep(3*time.Second + time.Millisecond)
		synctest.Wait()
		if got := n.Load(); got != 3 {
			t.Fatalf("%d reports in 3 intervals", got)
		}
		stop()
		if got := n.Load(); got != 4 {
			t.Fatalf("%d reports after stop, want a last one", got)
		}
	})
}

func TestRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		transient, final := errors.New("transient"), errors.New("final")
		isFinal := func(err error) bool { return errors.Is(err, final) }
		calls := 0
		start := time.Now()
		err := Retry(t.Context(), 3, isFinal, func() error { calls++; return transient })
		if !errors.Is(err, transient) || calls != 3 || time.Since(start) != 500*time.Millisecond {
			t.Fatalf("always transient: %v after %d calls and %s; want it after 3 and 500ms", err, calls, time.Since(start))
		}
		calls = 0
		err = Retry(t.Context(), 3, isFinal, func() error {
			calls++
			if calls == 1 {
				return transient
			}
			return final
		})
		if !errors.Is(err, final) || calls != 2 {
			t.Fatalf("final on the 2nd call: %v after %d calls", err, calls)
		}
		ctx, cancel := context.WithCancel(t.Context())
		calls = 0
		err = Retry(ctx, 3, isFinal, func() error { calls++; cancel(); return transient })
		if !errors.Is(err, transient) || calls != 1 {
			t.Fatalf("cancelled during the 1st call: %v after %d calls", err, calls)
		}
	})
}

// TestSleep: Sleep waits out its duration, and returns at once with the
// context's error when the context has ended.
func TestSleep(t *testing.T) {
	if err := Sleep(t.Context(), time.Millisecond); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with an ended context: %v, want context.Canceled", err)
	}
}
