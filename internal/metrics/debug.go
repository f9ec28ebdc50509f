package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// DebugOptions configure the debug listener's handler.
type DebugOptions struct {
	// Metrics served at MetricsPath; nil serves none.
	Metrics *Metrics
	// MetricsPath defaults to /metrics.
	MetricsPath string
	// Ready reports whether the process can serve (nil error); nil means
	// always ready.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds one readiness check (default 5s).
	ReadyTimeout time.Duration
	// Handlers adds operator endpoints by path (e.g. /dedup/stats).
	Handlers map[string]http.Handler
}

// DebugHandler serves, for operators and orchestrators only (it must not
// be reachable by registry clients):
//
//	/metrics         Prometheus metrics (or MetricsPath)
//	/healthz         200 while the process runs (liveness)
//	/readyz          200 when Ready passes, 503 with the reason otherwise
//	/debug/pprof/    Go profiles
//
// plus o.Handlers.
func DebugHandler(o DebugOptions) http.Handler {
	if o.MetricsPath == "" {
		o.MetricsPath = "/metrics"
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 5 * time.Second
	}
	mux := http.NewServeMux()
	if o.Metrics != nil {
		mux.Handle(o.MetricsPath, o.Metrics.Handler())
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		plain(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if o.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), o.ReadyTimeout)
			defer cancel()
			if err := o.Ready(ctx); err != nil {
				plain(w, http.StatusServiceUnavailable, fmt.Sprintf("not ready: %v\n", err))
				return
			}
		}
		plain(w, http.StatusOK, "ok\n")
	})
	// The pprof handlers, mounted on this mux only: importing net/http/pprof
	// also registers them on http.DefaultServeMux, which cairn never serves.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	for p, h := range o.Handlers {
		mux.Handle(p, h)
	}
	return mux
}

func plain(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// StorageReady returns a readiness check that lists the storage root: one
// cheap call that fails when the storage cannot be reached or read (a
// bucket that does not answer, a root directory that is gone or
// unreadable). An empty registry is ready.
func StorageReady(d driver.Driver) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if _, err := d.List(ctx, "/"); err != nil {
			return fmt.Errorf("storage (%s): %w", d.Name(), err)
		}
		return nil
	}
}
