package bench

import (
	"context"
	"errors"
	"math"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	cases := []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{ms(7), 7 * time.Millisecond},
		{ms(9, 1, 5), 5 * time.Millisecond},
		{ms(4, 1, 3, 2), 2500 * time.Microsecond},
	}
	for _, c := range cases {
		in := append([]time.Duration(nil), c.in...)
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Errorf("median reordered its input: %v", c.in)
			}
		}
	}
}

func TestPercentileNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i))
	}
	for p, want := range map[float64]time.Duration{50: 50, 99: 99, 100: 100, 1: 1, 0.1: 1} {
		if got := percentile(s, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if got := percentile(s[:1], 99); got != 1 {
		t.Errorf("p99 of one sample = %v, want 1", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of none = %v, want 0", got)
	}
}

func TestThroughputOf(t *testing.T) {
	// 100 MB moved in 1s, 2s, 4s: best 100 MB/s, median 50 MB/s.
	tp := throughputOf(100e6, []time.Duration{2 * time.Second, time.Second, 4 * time.Second})
	if tp.Runs != 3 || !near(tp.BestMBps, 100) || !near(tp.MedianMBps, 50) || !near(tp.BestMs, 1000) || !near(tp.MedianMs, 2000) {
		t.Errorf("throughputOf = %+v", tp)
	}
	if tp := throughputOf(1, nil); tp != (Throughput{}) {
		t.Errorf("throughputOf(no runs) = %+v, want zero", tp)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }

func TestRepeatFor(t *testing.T) {
	if got := repeatFor(0, 1<<20); got != 3 {
		t.Errorf("auto repeat for 1MiB = %d, want 3", got)
	}
	if got := repeatFor(0, 512<<20); got != 1 {
		t.Errorf("auto repeat for 512MiB = %d, want 1", got)
	}
	if got := repeatFor(5, 512<<20); got != 5 {
		t.Errorf("explicit repeat = %d, want 5", got)
	}
}

func TestWithDigestKeepsUploadState(t *testing.T) {
	u, _ := url.Parse("http://r.example/v2/a/b/blobs/uploads/123?_state=xyz")
	got, _ := url.Parse(withDigest(u, "sha256:abc"))
	if q := got.Query(); q.Get("_state") != "xyz" || q.Get("digest") != "sha256:abc" || got.Path != u.Path {
		t.Errorf("withDigest = %s", got)
	}
}

func TestRequestLoopCountsAndStops(t *testing.T) {
	var calls atomic.Int64
	lat, _, err := requestLoop(context.Background(), 50, 4, func(context.Context) error {
		calls.Add(1)
		return nil
	})
	if err != nil || len(lat) != 50 || calls.Load() != 50 {
		t.Fatalf("got %d latencies, %d calls, err %v; want 50, 50, nil", len(lat), calls.Load(), err)
	}

	// Calls after the failing one wait for the loop to end them, so that
	// how far the other workers get does not depend on scheduling: each
	// makes at most one call past the failure.
	boom := errors.New("boom")
	calls.Store(0)
	_, _, err = requestLoop(context.Background(), 1000, 4, func(ctx context.Context) error {
		switch n := calls.Add(1); {
		case n == 10:
			return boom
		case n > 10:
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
	if n := calls.Load(); n > 10+4 {
		t.Errorf("loop went on to %d calls after an error", n)
	}
}
