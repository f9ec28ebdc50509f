// Package server is cairn's HTTP front: the OCI distribution API v2 routes,
// authorization of every request before it reaches a handler, OCI error
// bodies, read-only mode, request metrics and one structured log line per
// request. It translates HTTP to calls on the registry package and back.
package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/opencontainers/go-digest"
)

// Options tune a Server.
type Options struct {
	// ReadOnly refuses every request that would change storage.
	ReadOnly bool
	// Logger receives the access log and internal errors; nil discards.
	Logger *slog.Logger
	// Auth, when set, authorizes every request before it is dispatched;
	// nil serves everyone.
	Auth auth.Authorizer
	// Metrics, when set, receives one observation per request.
	Metrics Observer
	// Headers are added to every response (distribution's http.headers).
	Headers http.Header
	// Prefix ("" or "/path/") is the path the API is served under.
	Prefix string
	// Host, when set, is the base of every Location URL (http.host).
	Host *url.URL
	// AbsoluteURLs makes Location headers absolute URLs built from the
	// request (http.relativeurls: false); by default they are paths.
	AbsoluteURLs bool
	// NoAccessLog drops the one log line per request.
	NoAccessLog bool
	// MaxCatalogEntries (catalog.maxentries) and MaxTags (tags.maxtags)
	// bound listing pages as distribution does; 0 leaves cairn's rules.
	MaxCatalogEntries int
	MaxTags           int
	// Healthy, when set, is asked before every request: while it returns
	// an error the request is answered 503 UNAVAILABLE, as distribution
	// answers while a health check fails.
	Healthy func() error
	// BodyIdleTimeout ends a request whose body delivers no byte for this
	// long (0: no limit), so that a client trickling an upload cannot hold
	// a connection forever. Whole-request timeouts cannot do this: a
	// large layer upload legitimately takes many minutes.
	BodyIdleTimeout time.Duration
	// Events, when set, receives an event for every push, pull, delete
	// and mount (distribution's notifications; see events.go).
	// EventReferences adds a manifest's descriptors to its events.
	Events          Events
	EventReferences bool
	// Mirror, when set, fills the repositories it mirrors from their
	// upstream registries on pulls, and pushes to them are refused.
	Mirror Mirror
	// Pulls, when set, records each pull of a manifest by tag (retention's
	// pulled-within rules).
	Pulls interface{ Pulled(repo, tag string) }
}

// Mirror is a pull-through cache (package proxy implements it): for the
// repositories it mirrors, manifest and blob reads go through it.
type Mirror interface {
	Mirrors(repo string) bool
	Manifest(ctx context.Context, repo, ref string, head bool) (*manifest.Manifest, error)
	// StatBlob with fetch (a GET) may start fetching the blob.
	StatBlob(ctx context.Context, repo string, d digest.Digest, fetch bool) (registry.BlobInfo, error)
	OpenBlob(ctx context.Context, repo string, d digest.Digest, info registry.BlobInfo, offset int64) (io.ReadCloser, error)
}

// mirrored reports whether repo belongs to the pull-through cache.
func (s *Server) mirrored(repo string) bool {
	return s.opts.Mirror != nil && repo != "" && s.opts.Mirror.Mirrors(repo)
}

// errMirrored refuses a push to a mirrored repository.
var errMirrored = fmt.Errorf("%w: the repository mirrors an upstream registry; pushes are refused", registry.ErrUnsupported)

// clientID names the client of r for the registry's pull records: the
// authenticated user, else the remote IP.
func clientID(r *http.Request, rt route) string {
	if rt.user != "" {
		return "user:" + rt.user
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}

// Observer receives request measurements (metrics.Metrics implements it).
type Observer interface {
	// ObserveRequest records an answered request; route is a fixed name.
	ObserveRequest(route, method string, status int, bytesIn, bytesOut int64, d time.Duration)
	// UploadsInProgress adds delta to the blob uploads being received.
	UploadsInProgress(delta int)
	// BlobRedirect counts a blob GET answered with a redirect (ok), or one
	// cairn served because the redirect URL could not be made (!ok).
	BlobRedirect(ok bool)
}

// Server answers the registry API.
type Server struct {
	reg  *registry.Registry
	opts Options
	log  *slog.Logger
	urls urlBuilder
}

// New returns a Server over reg.
func New(reg *registry.Registry, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{reg: reg, opts: opts, log: log, urls: urlBuilder{prefix: opts.Prefix, host: opts.Host, relative: !opts.AbsoluteURLs}}
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

// RouteName names the API route of path ("manifest", "blob", ...), as
// metrics label it: a trace's span name.
func RouteName(path string) string { return routeNames[parseRoute(path).kind] }

// routeNames label a route's metrics.
var routeNames = [...]string{
	routeNone:        "unknown",
	routeBase:        "base",
	routeCatalog:     "catalog",
	routeTags:        "tags",
	routeManifest:    "manifest",
	routeReferrers:   "referrers",
	routeBlob:        "blob",
	routeUploadStart: "upload_start",
	routeUpload:      "upload",
}

// routeEndpoints select the access a route needs (auth.Needed).
var routeEndpoints = [...]auth.Endpoint{
	routeNone:        auth.EndpointOther,
	routeBase:        auth.EndpointOther,
	routeCatalog:     auth.EndpointCatalog,
	routeTags:        auth.EndpointTags,
	routeManifest:    auth.EndpointManifest,
	routeReferrers:   auth.EndpointReferrers,
	routeBlob:        auth.EndpointBlob,
	routeUploadStart: auth.EndpointUpload,
	routeUpload:      auth.EndpointUpload,
}

type route struct {
	kind routeKind
	name string // repository
	ref  string // tag, digest or upload id
	user string // authenticated user, "" when anonymous
	// grant is what the caller may do; nil when authentication is off.
	grant *auth.Grant
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

// ServeHTTP logs, measures and dispatches the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	for name, values := range s.opts.Headers {
		for _, v := range values {
			w.Header().Add(name, v)
		}
	}
	lw := &loggingWriter{ResponseWriter: w, status: http.StatusOK}
	body := &countingReader{r: r.Body}
	if s.opts.BodyIdleTimeout > 0 {
		body.rc, body.idle = http.NewResponseController(w), s.opts.BodyIdleTimeout
	}
	r.Body = body
	logPath := r.URL.Path
	rt := route{}
	if s.urls.stripPrefix(r) {
		rt = parseRoute(r.URL.Path)
	}
	m := s.opts.Metrics
	if m != nil && isUpload(rt, r.Method) {
		m.UploadsInProgress(1)
		defer m.UploadsInProgress(-1)
	}
	var note *eventNote
	if s.opts.Events != nil {
		r, note = withEventNote(r)
	}
	var user string
	if err := s.unhealthy(); err != nil {
		writeErrorBody(lw, http.StatusServiceUnavailable, apiError{Code: "UNAVAILABLE", Message: "service unavailable: " + err.Error()})
	} else {
		user = s.dispatch(lw, r, rt)
	}
	d := time.Since(start)
	if m != nil {
		m.ObserveRequest(routeNames[rt.kind], r.Method, lw.status, body.n, lw.n, d)
	}
	if note != nil {
		s.emitEvents(r, rt, user, lw.status, lw.Header(), note)
	}
	if s.opts.NoAccessLog {
		return
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("method", r.Method),
		slog.String("path", logPath),
		slog.Int("status", lw.status),
		slog.Int64("bytes_in", body.n),
		slog.Int64("bytes_out", lw.n),
		slog.Duration("duration", d),
		slog.String("remote", r.RemoteAddr),
		slog.String("user", user),
		slog.String("user_agent", r.UserAgent()),
	)
}

func (s *Server) unhealthy() error {
	if s.opts.Healthy == nil {
		return nil
	}
	return s.opts.Healthy()
}

// isUpload reports a request that carries blob data into an upload.
func isUpload(rt route, method string) bool {
	return (rt.kind == routeUploadStart || rt.kind == routeUpload) &&
		(method == http.MethodPost || method == http.MethodPatch || method == http.MethodPut)
}

// dispatch answers the request and returns the authenticated user ("" when
// anonymous or unauthenticated), for the access log.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, rt route) string {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	validName := rt.name == "" || registry.ValidateName(rt.name) == nil
	var user string
	if s.opts.Auth != nil {
		// Authorization comes first, so that whether a repository exists,
		// or even whether a path is an endpoint, is answered only to
		// callers allowed to ask. A path that names no endpoint (or an
		// invalid name) needs authentication only.
		var need []auth.Access
		if rt.kind != routeNone && validName {
			need = auth.Needed(routeEndpoints[rt.kind], rt.name, r.Method)
		}
		g, err := s.opts.Auth.Authorize(r, need)
		user = g.Subject
		if err != nil {
			s.writeAuthError(w, r, err)
			return user
		}
		rt.grant = &g
	}
	if rt.kind == routeNone {
		s.writeError(w, r, errUnsupportedRoute)
		return user
	}
	if !validName {
		s.writeError(w, r, registry.ValidateName(rt.name))
		return user
	}
	if s.opts.ReadOnly && r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.writeError(w, r, errDenied)
		return user
	}
	if s.mirrored(rt.name) && (r.Method == http.MethodPut || r.Method == http.MethodPost || r.Method == http.MethodPatch) {
		s.writeError(w, r, errMirrored)
		return user
	}
	rt.user = user
	r = r.WithContext(registry.WithClient(r.Context(), clientID(r, rt)))
	if !s.route(w, r, rt) {
		s.writeError(w, r, errMethodNotAllowed)
	}
	return user
}

// mountSources decides where a mount (?mount=<digest>) may take its blob
// from, as the repositories to try; nil with anywhere true means the whole
// registry. A "from" repository the caller may not pull is dropped, as
// distribution does; a mount without "from" searches only repositories the
// caller may pull (with authentication on). Either way a refused mount
// becomes a plain upload: the caller sends the bytes and learns nothing of
// what it may not see, not even whether the digest exists.
func mountSources(r *http.Request, g *auth.Grant) (from []string, anywhere bool) {
	q := r.URL.Query()
	src := q.Get("from")
	if g == nil {
		if src == "" {
			return nil, true
		}
		return []string{src}, false
	}
	if src != "" {
		if g.Allows(auth.Access{Type: auth.TypeRepository, Name: src, Action: auth.ActionPull}) {
			return []string{src}, false
		}
		return nil, false
	}
	all, names := g.PullableRepositories()
	if all {
		return nil, true
	}
	if len(names) > maxMountSources {
		names = names[:maxMountSources]
	}
	return names, false
}

// maxMountSources bounds the repositories one mount without "from" tries:
// each costs a stat, and a token rarely names more.
const maxMountSources = 64

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

// countingReader counts request body bytes and, with idle set, moves the
// connection's read deadline forward as bytes arrive, so a body that stops
// flowing for idle fails the read instead of holding the connection.
type countingReader struct {
	r io.ReadCloser
	n int64

	rc       *http.ResponseController
	idle     time.Duration
	deadline time.Time // last deadline set; moved when half of idle is left
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.rc != nil {
		if now := time.Now(); c.deadline.Sub(now) < c.idle/2 {
			c.deadline = now.Add(c.idle)
			// An error means the connection cannot take deadlines
			// (unlikely for net/http's own); the read goes on unbounded.
			_ = c.rc.SetReadDeadline(c.deadline)
		}
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil {
		// The body is done. net/http now watches the connection for the
		// client going away, with no deadline; one set from here would
		// end that watch and cancel the request while it finishes.
		c.rc = nil
	}
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }
