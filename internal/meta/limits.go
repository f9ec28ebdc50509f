package meta

import "time"

// PullLimits bound the ULmap and the popularity counters (Pulls). Both
// stores take them, with the same defaults, so a deployment that moves from
// bolt to Redis keeps its limits.
type PullLimits struct {
	// MaxLayersPerClient caps ULmap entries per client (default 4096).
	MaxLayersPerClient int
	// PopularityBucket is the width of one popularity counter (default 1h).
	PopularityBucket time.Duration
	// PopularityBuckets is how many counters each layer keeps (default 48),
	// so LayerPulls sees back PopularityBucket*PopularityBuckets.
	PopularityBuckets int
}

// WithDefaults returns l with each zero or negative field set to its default.
func (l PullLimits) WithDefaults() PullLimits {
	if l.MaxLayersPerClient <= 0 {
		l.MaxLayersPerClient = 4096
	}
	if l.PopularityBucket <= 0 {
		l.PopularityBucket = time.Hour
	}
	if l.PopularityBuckets <= 0 {
		l.PopularityBuckets = 48
	}
	return l
}
