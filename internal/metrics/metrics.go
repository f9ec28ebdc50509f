// Package metrics is cairn's operational surface: the Prometheus metrics of
// one process (HTTP requests, bytes, uploads, storage driver calls, garbage
// collection, deduplication, caches) and the debug listener's handler that
// serves them with health, readiness and profiling endpoints.
//
// Each Metrics value owns its own prometheus.Registry; nothing is registered
// on the client library's global default registry, so tests and several
// servers in one process never share counters.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "cairn"

// latencyBuckets span a manifest GET (milliseconds) to a multi-gigabyte
// layer upload (minutes).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// storageBuckets span a local stat (microseconds) to a slow object-store
// call or bulk delete (tens of seconds).
var storageBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Metrics holds one process's metrics.
type Metrics struct {
	reg *prometheus.Registry

	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	bytesIn  *prometheus.CounterVec
	bytesOut *prometheus.CounterVec
	uploads  prometheus.Gauge
	redirect *prometheus.CounterVec

	storageOps     *prometheus.CounterVec
	storageErrors  *prometheus.CounterVec
	storageLatency *prometheus.HistogramVec
	storageDeleted *prometheus.CounterVec

	gcRuns     *prometheus.CounterVec
	gcDuration prometheus.Histogram
	gcDeleted  *prometheus.CounterVec

	dedupSaved     prometheus.Gauge
	dedupLayers    *prometheus.CounterVec
	dedupPredicted *prometheus.CounterVec
	dedupRebuild   *prometheus.CounterVec
	dedupCacheFail *prometheus.CounterVec
	cache          *prometheus.CounterVec
}

// New returns a Metrics with every collector registered on a fresh
// registry, including the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	f := factory{m.reg}
	m.requests = f.counterVec("http_requests_total",
		"HTTP requests answered, by API route, method and status code.", "route", "method", "status")
	m.latency = f.histogramVec("http_request_duration_seconds",
		"Time from request start to the last response byte, by API route and method.", latencyBuckets, "route", "method")
	m.bytesIn = f.counterVec("http_request_body_bytes_total",
		"Request body bytes received, by API route and method.", "route", "method")
	m.bytesOut = f.counterVec("http_response_body_bytes_total",
		"Response body bytes sent, by API route and method.", "route", "method")
	m.uploads = f.gauge("uploads_in_progress",
		"Blob upload requests (POST, PATCH, PUT on an upload) being received right now.")

	m.redirect = f.counterVec("blob_redirects_total",
		"Blob GETs answered with a 307 to the object store or CDN (result ok), or served by cairn because no URL could be signed (result error).", "result")

	m.storageOps = f.counterVec("storage_operations_total",
		"Storage driver calls, by driver and operation.", "driver", "operation")
	m.storageErrors = f.counterVec("storage_errors_total",
		"Storage driver calls that failed, by driver and operation. A path that does not exist is an answer, not a failure, and is not counted.", "driver", "operation")
	m.storageLatency = f.histogramVec("storage_operation_duration_seconds",
		"Storage driver call latency, by driver and operation.", storageBuckets, "driver", "operation")
	m.storageDeleted = f.counterVec("storage_deleted_files_total",
		"Files removed through the driver's bulk DeleteFiles, by driver.", "driver")

	m.gcRuns = f.counterVec("gc_runs_total",
		"Garbage collection runs, by result (ok, error).", "result")
	m.gcDuration = f.histogram("gc_duration_seconds",
		"Duration of garbage collection runs.", []float64{1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 21600})
	m.gcDeleted = f.counterVec("gc_deleted_total",
		"Objects deleted by garbage collection, by kind (blobs, manifests, links, files, ...).", "kind")

	m.dedupSaved = f.gauge("dedup_saved_bytes",
		"Bytes of storage deduplication saves, as the dedup worker last computed it.")
	m.dedupLayers = f.counterVec("dedup_layers_total",
		"Layers the dedup worker processed, by outcome (deduplicated, indexed, irreproducible, unchanged, deferred, gone, busy: another node has it, error).", "outcome")
	m.dedupPredicted = f.counterVec("dedup_predicted_total",
		"Layers warmed ahead of a predicted pull, by cache (preconstruct: rebuilt to disk, prefetch: read into memory).", "cache")
	m.dedupRebuild = f.counterVec("dedup_rebuild_failures_total",
		"Rebuilds of deduplicated layers (for a pull, a predicted pull or a promotion) that failed, by reason (missing_file, corrupt_file: a unique file absent or not matching its digest; mismatch: the recipe does not reproduce the blob; storage: a storage error; other). Each is logged at ERROR with the layer and file digests.", "reason")
	m.dedupCacheFail = f.counterVec("dedup_cache_write_failures_total",
		"Layers a dedup cache streamed to their readers without keeping a copy, by cache and reason (declined: the copy would have eaten into the volume's free margin; no_space, read_only, permission, io: creating, writing or syncing it failed, each also logged at WARN). The readers got every byte.", "cache", "reason")
	m.cache = f.counterVec("cache_requests_total",
		"Cache lookups, by cache and result (hit, miss); the hit ratio is hits over the total.", "cache", "result")

	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Registerer lets other packages add their own collectors to this
// process's registry.
func (m *Metrics) Registerer() prometheus.Registerer { return m.reg }

// Gatherer is the registry, for tests and custom exposition.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Handler serves the metrics in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
}

// ObserveRequest records one answered API request. route is a fixed name
// (the server's route kinds), never a path, so that label values stay few.
func (m *Metrics) ObserveRequest(route, method string, status int, bytesIn, bytesOut int64, d time.Duration) {
	method = normalizeMethod(method)
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(route, method).Observe(d.Seconds())
	if bytesIn > 0 {
		m.bytesIn.WithLabelValues(route, method).Add(float64(bytesIn))
	}
	if bytesOut > 0 {
		m.bytesOut.WithLabelValues(route, method).Add(float64(bytesOut))
	}
}

// UploadsInProgress adds delta (+1 when an upload request starts, -1 when
// it ends) to the uploads in progress.
func (m *Metrics) UploadsInProgress(delta int) { m.uploads.Add(float64(delta)) }

// BlobRedirect counts a blob GET redirected (ok) or served by cairn after
// signing its URL failed (!ok).
func (m *Metrics) BlobRedirect(ok bool) {
	result := "ok"
	if !ok {
		result = "error"
	}
	m.redirect.WithLabelValues(result).Inc()
}

// GCRun records a finished garbage collection run.
func (m *Metrics) GCRun(err error, d time.Duration) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.gcRuns.WithLabelValues(result).Inc()
	m.gcDuration.Observe(d.Seconds())
}

// GCDeleted counts n objects of kind deleted by garbage collection.
func (m *Metrics) GCDeleted(kind string, n int) {
	if n > 0 {
		m.gcDeleted.WithLabelValues(kind).Add(float64(n))
	}
}

// SetDedupSavedBytes sets how many bytes deduplication saves right now.
func (m *Metrics) SetDedupSavedBytes(n int64) { m.dedupSaved.Set(float64(n)) }

// DedupProcessed counts one layer the dedup worker processed.
func (m *Metrics) DedupProcessed(outcome string) { m.dedupLayers.WithLabelValues(outcome).Inc() }

// DedupRebuildFailed counts one failed rebuild of a deduplicated layer.
func (m *Metrics) DedupRebuildFailed(reason string) { m.dedupRebuild.WithLabelValues(reason).Inc() }

// DedupCacheWriteFailed counts one layer a dedup cache served without
// keeping its copy (declined, or its write failed).
func (m *Metrics) DedupCacheWriteFailed(cache, reason string) {
	m.dedupCacheFail.WithLabelValues(cache, reason).Inc()
}

// DedupPredicted counts one layer warmed for a predicted pull.
func (m *Metrics) DedupPredicted(cache string) { m.dedupPredicted.WithLabelValues(cache).Inc() }

// CacheLookup counts one lookup in the named cache.
func (m *Metrics) CacheLookup(cache string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.cache.WithLabelValues(cache, result).Inc()
}

// normalizeMethod keeps the method label to the methods the API uses.
func normalizeMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}

// factory creates collectors in cairn's namespace and registers them.
type factory struct{ reg prometheus.Registerer }

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}
