// Package server is cairn's HTTP front: the OCI distribution API v2 routes,
// OCI error bodies, read-only mode and one structured log line per request.
// It translates HTTP to calls on the registry package and back.
package server

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/registry"
)

// Options tune a Server.
type Options struct {
	// ReadOnly refuses every request that would change storage.
	ReadOnly bool
	// Logger receives the access log and internal errors; nil discards.
	Logger *slog.Logger
}

// Server answers the registry API.
type Server struct {
	reg  *registry.Registry
	opts Options
	log  *slog.Logger
}

// New returns a Server over reg.
func New(reg *registry.Registry, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{reg: reg, opts: opts, log: log}
}

// routeKind names an API endpoint.
type routeKind int

const (
	routeNone routeKind = iota
	routeBase
	routeCatalog
	routeTags
	routeManifest
	routeReferrers
	routeBlob
	routeUploadStart
	routeUpload
)

type route struct {
	kind routeKind
	name string // repository
	ref  string // tag, digest or upload id
}

// parseRoute matches a /v2/ path from its end, because repository names may
// themselves contain segments such as "blobs" or "manifests".
func parseRoute(p string) route {
	switch p {
	case "/v2", "/v2/":
		return route{kind: routeBase}
	case "/v2/_catalog":
		return route{kind: routeCatalog}
	}
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		return route{}
	}
	segs := strings.Split(rest, "/")
	n := len(segs)
	if n < 3 {
		return route{}
	}
	name := func(k int) string { return strings.Join(segs[:n-k], "/") }
	switch {
	case segs[n-2] == "tags" && segs[n-1] == "list":
		return route{kind: routeTags, name: name(2)}
	case segs[n-2] == "manifests":
		return route{kind: routeManifest, name: name(2), ref: segs[n-1]}
	case segs[n-2] == "referrers":
		return route{kind: routeReferrers, name: name(2), ref: segs[n-1]}
	case n >= 4 && segs[n-3] == "blobs" && segs[n-2] == "uploads":
		if segs[n-1] == "" {
			return route{kind: routeUploadStart, name: name(3)}
		}
		return route{kind: routeUpload, name: name(3), ref: segs[n-1]}
	case segs[n-2] == "blobs" && segs[n-1] == "uploads":
		return route{kind: routeUploadStart, name: name(2)}
	case segs[n-2] == "blobs":
		return route{kind: routeBlob, name: name(2), ref: segs[n-1]}
	}
	return route{}
}

// ServeHTTP logs the request and dispatches it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	lw := &loggingWriter{ResponseWriter: w, status: http.StatusOK}
	body := &countingReader{r: r.Body}
	r.Body = body
	s.dispatch(lw, r)
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", lw.status),
		slog.Int64("bytes_in", body.n),
		slog.Int64("bytes_out", lw.n),
		slog.Duration("duration", time.Since(start)),
		slog.String("remote", r.RemoteAddr),
		slog.String("user_agent", r.UserAgent()),
	)
}

func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	rt := parseRoute(r.URL.Path)
	if rt.kind == routeNone {
		s.writeError(w, r, errUnsupportedRoute)
		return
	}
	if rt.name != "" {
		if err := registry.ValidateName(rt.name); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	if s.opts.ReadOnly && r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.writeError(w, r, errDenied)
		return
	}
	if !s.route(w, r, rt) {
		s.writeError(w, r, errMethodNotAllowed)
	}
}

// route calls the handler for rt and r.Method; false means the endpoint has
// no such method.
func (s *Server) route(w http.ResponseWriter, r *http.Request, rt route) bool {
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case rt.kind == routeBase && get:
		s.base(w, r)
	case rt.kind == routeCatalog && r.Method == http.MethodGet:
		s.catalog(w, r)
	case rt.kind == routeTags && r.Method == http.MethodGet:
		s.tags(w, r, rt)
	case rt.kind == routeManifest && get:
		s.getManifest(w, r, rt)
	case rt.kind == routeManifest && r.Method == http.MethodPut:
		s.putManifest(w, r, rt)
	case rt.kind == routeManifest && r.Method == http.MethodDelete:
		s.deleteManifest(w, r, rt)
	case rt.kind == routeReferrers && r.Method == http.MethodGet:
		s.referrers(w, r, rt)
	case rt.kind == routeBlob && get:
		s.getBlob(w, r, rt)
	case rt.kind == routeBlob && r.Method == http.MethodDelete:
		s.deleteBlob(w, r, rt)
	case rt.kind == routeUploadStart && r.Method == http.MethodPost:
		s.startUpload(w, r, rt)
	case rt.kind == routeUpload && r.Method == http.MethodGet:
		s.uploadStatus(w, r, rt)
	case rt.kind == routeUpload && r.Method == http.MethodPatch:
		s.patchUpload(w, r, rt)
	case rt.kind == routeUpload && r.Method == http.MethodPut:
		s.finishUpload(w, r, rt)
	case rt.kind == routeUpload && r.Method == http.MethodDelete:
		s.cancelUpload(w, r, rt)
	default:
		return false
	}
	return true
}

func (s *Server) base(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", "2")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		io.WriteString(w, "{}")
	}
}

// loggingWriter records the status and body size for the access log. It
// forwards ReadFrom so blob GETs keep the kernel's sendfile path.
type loggingWriter struct {
	http.ResponseWriter
	status      int
	n           int64
	wroteHeader bool
}

func (w *loggingWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *loggingWriter) Write(p []byte) (int, error) {
	w.wroteHeader = true
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *loggingWriter) ReadFrom(src io.Reader) (int64, error) {
	w.wroteHeader = true
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err := rf.ReadFrom(src)
		w.n += n
		return n, err
	}
	n, err := io.Copy(w.ResponseWriter, src)
	w.n += n
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *loggingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type countingReader struct {
	r io.ReadCloser
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }
