package metrics

import "github.com/prometheus/client_golang/prometheus"

// Replication counts what replication copied to and from peer registries
// (replicate.Metrics).
type Replication struct {
	images   *prometheus.CounterVec
	blobs    *prometheus.CounterVec
	passes   *prometheus.CounterVec
	failures *prometheus.CounterVec
}

// Replication registers the replication metrics on m's registry; call it
// once, when replication targets are configured.
func (m *Metrics) Replication() *Replication {
	f := factory{m.reg}
	return &Replication{
		images: f.counterVec("replication_manifests_total",
			"Manifests copied to (push) or from (pull) a peer registry, children of indexes and referrers included, by target and direction.", "target", "direction"),
		blobs: f.counterVec("replication_blob_bytes_total",
			"Blob bytes copied to or from a peer registry (blobs the other side had are not counted), by target and direction.", "target", "direction"),
		passes: f.counterVec("replication_passes_total",
			"Replication passes that ended, failed or not, by target.", "target"),
		failures: f.counterVec("replication_failures_total",
			"Replication passes that ended with errors (the peer unreachable, or an image refused), by target; the pass is retried with backoff.", "target"),
	}
}

// ReplicatedManifests counts n manifests copied for target.
func (r *Replication) ReplicatedManifests(target, direction string, n int) {
	r.images.WithLabelValues(target, direction).Add(float64(n))
}

// ReplicatedBytes counts blob bytes copied for target.
func (r *Replication) ReplicatedBytes(target, direction string, n int64) {
	r.blobs.WithLabelValues(target, direction).Add(float64(n))
}

// ReplicationPass counts a pass of target that ended, and whether it failed.
func (r *Replication) ReplicationPass(target string, failed bool) {
	r.passes.WithLabelValues(target).Inc()
	if failed {
		r.failures.WithLabelValues(target).Inc()
	}
}
