package bench

import (
	"math"
	"slices"
	"time"
)

// mbPerSec converts bytes moved in d into MB/s (10^6 bytes per second).
func mbPerSec(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / 1e6 / d.Seconds()
}

// median returns the median of ds (the mean of the two middle values for an
// even count), or 0 for none. ds is not modified.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return s[n/2-1] + (s[n/2]-s[n/2-1])/2
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, or 0 for none. sorted must be in ascending order.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// throughputOf summarises the durations of runs that each moved bytes.
func throughputOf(bytes int64, ds []time.Duration) Throughput {
	if len(ds) == 0 {
		return Throughput{}
	}
	best := slices.Min(ds)
	med := median(ds)
	return Throughput{
		Runs:       len(ds),
		BestMBps:   mbPerSec(bytes, best),
		MedianMBps: mbPerSec(bytes, med),
		BestMs:     ms(best),
		MedianMs:   ms(med),
	}
}

// ms expresses d in (fractional) milliseconds, the unit of the JSON output.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
