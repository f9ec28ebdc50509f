// Package webui is the built-in web page: what the registry holds
// (repositories, tags with sizes, media types, platforms and referrers)
// and the storage story at a glance (logical against stored bytes, the
// dedup ratio over time, bytes freed per GC run, cache hit ratios), drawn
// on the server as HTML and inline SVG with embedded assets: nothing for a
// user to build. Authentication and authorization are the API's: without
// credentials a protected registry shows nothing, and a user sees only the
// repositories they may pull. Admins also manage robot keys there
// (robots.go), through the functions `cairn robot` uses.
package webui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/parallel"
	"github.com/cairn-registry/cairn/internal/registry"
)

//go:embed assets
var assets embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"bytes": HumanBytes,
	"short": func(d digest.Digest) string {
		if len(d.Encoded()) < 12 {
			return d.String()
		}
		return d.Encoded()[:12]
	},
}).ParseFS(assets, "assets/*.html"))

// Registry is what the page reads of the registry.
type Registry interface {
	Repositories(ctx context.Context, n int, last string) ([]string, bool, error)
	Tags(ctx context.Context, repo string) ([]string, error)
	GetManifest(ctx context.Context, repo, ref string) (*manifest.Manifest, error)
	Referrers(ctx context.Context, repo string, subject digest.Digest, artifactType string) ([]ocispec.Descriptor, error)
}

// Storage is what storage holds now.
type Storage struct {
	Dedup   bool  // dedup keeps figures (it ran on this store)
	Logical int64 // bytes without dedup
	Stored  int64
	At      time.Time // when measured
	// Measuring: nothing measured yet (the page says so, not 0 B).
	Measuring bool
	// Refreshing: changes came that these figures do not show yet.
	Refreshing bool
	// Error is why the last measurement failed ("" if it did not).
	Error string
}

// CacheRatio is one cache's hits among its lookups.
type CacheRatio struct {
	Cache         string
	Hits, Lookups float64
}

// Options configure the page.
type Options struct {
	Registry Registry
	// Auth, when set, authorizes visitors as the API does.
	Auth auth.Authorizer
	// Storage reports the current figures (nil: none); Figures.Current.
	Storage func(ctx context.Context) (Storage, error)
	// Caches reports the hit ratios (nil: none).
	Caches func() []CacheRatio
	// History is the storage story over time; Figures.History.
	History *History
	// Prefix is where the page is served ("/ui").
	Prefix string
	// Login, when set, is where visitors without credentials are sent to
	// log in (auth.LoginURL, the OIDC login), instead of the Basic
	// challenge; Logout is where the page links to log out.
	Login  func(next string) string
	Logout string
	// Robots, when set, lets admins manage robot keys at Prefix+"/robots/"
	// (robots.go); nil: the page says robot keys are off.
	Robots *RobotKeys
}

// Handler serves the page under opts.Prefix.
func Handler(opts Options) http.Handler {
	h := &handler{Options: opts, csrf: newCSRF()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+opts.Prefix+"/robots/{$}", h.robotsGet)
	mux.HandleFunc("POST "+opts.Prefix+"/robots/create", h.robotsCreate)
	mux.HandleFunc("POST "+opts.Prefix+"/robots/revoke", h.robotsRevoke)
	mux.HandleFunc("GET "+opts.Prefix+"/robots", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, opts.Prefix+"/robots/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET "+opts.Prefix+"/{$}", h.overview)
	mux.HandleFunc("GET "+opts.Prefix+"/repo/{name...}", h.repository)
	mux.Handle("GET "+opts.Prefix+"/assets/", http.StripPrefix(opts.Prefix, http.FileServerFS(assets)))
	mux.HandleFunc("GET "+opts.Prefix, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, opts.Prefix+"/", http.StatusMovedPermanently)
	})
	return mux
}

type handler struct {
	Options
	csrf csrf // the robot keys forms' tokens
}

// grant authorizes the visitor; false means it answered the refusal.
func (h *handler) grant(w http.ResponseWriter, r *http.Request) (*auth.Grant, bool) {
	return h.grantFor(w, r, nil)
}

// grantFor authorizes the visitor for need; false means it answered the
// refusal (the login, a challenge, 403).
func (h *handler) grantFor(w http.ResponseWriter, r *http.Request, need []auth.Access) (*auth.Grant, bool) {
	if h.Auth == nil {
		return nil, true
	}
	g, err := h.Auth.Authorize(r, need)
	if err == nil {
		return &g, true
	}
	var ch *auth.Challenge
	if errors.As(err, &ch) {
		if h.Login != nil && ch.Status() == http.StatusUnauthorized && r.Header.Get("Authorization") == "" {
			// A browser without a session: to the login, and back here.
			next := r.URL.RequestURI()
			if r.Method == http.MethodPost {
				// The login comes back with a GET: to the page the form
				// is on (its action's parent), not to the action.
				next = r.URL.Path[:strings.LastIndexByte(r.URL.Path, '/')+1]
			}
			http.Redirect(w, r, h.Login(next), http.StatusSeeOther)
			return nil, false
		}
		if v := ch.Header(); v != "" {
			w.Header().Set("WWW-Authenticate", v)
		}
		http.Error(w, ch.Message(), ch.Status())
		return nil, false
	}
	http.Error(w, "authorization failed", http.StatusInternalServerError)
	return nil, false
}

func mayPull(g *auth.Grant, repo string) bool {
	return g == nil || g.Allows(auth.Access{Type: auth.TypeRepository, Name: repo, Action: auth.ActionPull})
}

// reposPerPage is how many repositories one overview page lists.
const reposPerPage = 100

type overviewPage struct {
	Repositories []repoRow
	Total        int    // repositories the visitor may see
	Next         string // the ?last= of the next page; "" on the last
	Storage      *Storage
	Ratio        float64
	Charts       []template.HTML
	Generated    time.Time
	Prefix       string
	Visitor
}

// Visitor is who looks at a page: the user name ("" when anonymous or
// without authentication), where to log out ("" for no link) and, for
// admins, where robot keys are managed ("" for no link).
type Visitor struct {
	User, Logout, RobotKeys string
}

func (h *handler) visitor(g *auth.Grant) Visitor {
	if g == nil || g.Subject == "" {
		return Visitor{}
	}
	v := Visitor{User: g.Subject, Logout: h.Logout}
	if h.Auth != nil && g.ManagesRobots() {
		v.RobotKeys = h.Prefix + "/robots/"
	}
	return v
}

type repoRow struct {
	Name string
	Tags int
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	g, ok := h.grant(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	names, _, err := h.Registry.Repositories(ctx, -1, "")
	if err != nil {
		http.Error(w, "listing repositories: "+err.Error(), http.StatusInternalServerError)
		return
	}
	p := overviewPage{Prefix: h.Prefix, Visitor: h.visitor(g)}
	var visible []string
	for _, n := range names {
		if mayPull(g, n) {
			visible = append(visible, n)
		}
	}
	// A page of repositories after ?last=, their tags counted a few at a
	// time: on an object store each count is a listing.
	page, more := registry.Page(visible, reposPerPage, r.URL.Query().Get("last"))
	p.Repositories = make([]repoRow, len(page))
	errs := make([]error, len(page))
	parallel.For(ctx, len(page), 8, func(i int) {
		tags, err := h.Registry.Tags(ctx, page[i])
		if err != nil && !errors.Is(err, registry.ErrNameUnknown) {
			errs[i] = err
		}
		p.Repositories[i] = repoRow{Name: page[i], Tags: len(tags)}
	})
	if err := errors.Join(errs...); err != nil {
		http.Error(w, "listing tags: "+err.Error(), http.StatusInternalServerError)
		return
	}
	p.Total = len(visible)
	if more {
		p.Next = page[len(page)-1]
	}
	if h.Storage != nil {
		if st, err := h.Storage(ctx); err == nil {
			p.Storage = &st
			if !st.Measuring && st.Stored > 0 {
				p.Ratio = float64(st.Logical) / float64(st.Stored)
			}
		}
	}
	p.Charts = h.charts(p.Storage)
	p.Generated = time.Now().UTC() // after the figures, which may be waited for
	render(w, "overview.html", p)
}

// charts draws the storage story: the history, and the figures measured
// since its last sample (a point of class "now").
func (h *handler) charts(now *Storage) []template.HTML {
	var samples []Sample
	var runs []GCRun
	if h.History != nil {
		samples, runs = h.History.snapshot()
	}
	var logical, stored, ratio []point
	add := func(s Sample, now bool) {
		x := float64(s.At.Unix())
		at := s.At.UTC().Format(time.DateTime)
		logical = append(logical, point{X: x, Y: float64(s.Logical), Label: at, Now: now})
		stored = append(stored, point{X: x, Y: float64(s.Stored), Label: at, Now: now})
		if s.Stored > 0 {
			ratio = append(ratio, point{X: x, Y: float64(s.Logical) / float64(s.Stored), Label: at, Now: now})
		}
	}
	for _, s := range samples {
		add(s, false)
	}
	if now != nil && now.Dedup && !now.Measuring && (len(samples) == 0 || now.At.After(samples[len(samples)-1].At)) {
		add(Sample{At: now.At, Logical: now.Logical, Stored: now.Stored}, true)
	}
	var freed []point
	for _, run := range runs {
		freed = append(freed, point{X: float64(run.At.Unix()), Y: float64(run.Freed), Label: run.At.UTC().Format(time.DateTime)})
	}
	var hits []point
	if h.Caches != nil {
		for _, c := range h.Caches() {
			if c.Lookups > 0 {
				hits = append(hits, point{Y: 100 * c.Hits / c.Lookups, Label: c.Cache,
					Note: fmt.Sprintf("%.0f hits · %.0f misses", c.Hits, c.Lookups-c.Hits)})
			}
		}
	}
	return []template.HTML{
		lineChart("Logical (blue) and stored (green) bytes", "bytes", logical, stored),
		lineChart("Dedup ratio", "x", ratio),
		runChart("Bytes freed per GC run", "bytes", freed),
		barChart("Cache hit ratio", "%", hits),
	}
}

type repoPage struct {
	Name   string
	Tags   []tagRow
	Prefix string
	Visitor
}

type tagRow struct {
	Tag       string
	Digest    digest.Digest
	MediaType string
	Size      int64
	Platforms []string
	Referrers []string // artifact types
}

func (h *handler) repository(w http.ResponseWriter, r *http.Request) {
	g, ok := h.grant(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	ctx := r.Context()
	tags, err := h.Registry.Tags(ctx, name)
	if !mayPull(g, name) || errors.Is(err, registry.ErrNameUnknown) || errors.Is(err, registry.ErrNameInvalid) {
		// The same for a repository the visitor may not see.
		http.NotFound(w, r)
		return
	}
	if err != nil {
		http.Error(w, "listing tags: "+err.Error(), http.StatusInternalServerError)
		return
	}
	p := repoPage{Name: name, Prefix: h.Prefix, Visitor: h.visitor(g)}
	for _, t := range tags {
		m, err := h.Registry.GetManifest(ctx, name, t)
		if err != nil {
			continue // untagged meanwhile
		}
		row := tagRow{Tag: t, Digest: m.Digest, MediaType: m.MediaType, Size: int64(len(m.Content))}
		row.Size += imageSize(m)
		for i, c := range m.Manifests {
			if i == 32 {
				break // a page, not an inventory
			}
			if c.Platform != nil {
				pl := c.Platform.OS + "/" + c.Platform.Architecture
				if c.Platform.Variant != "" {
					pl += "/" + c.Platform.Variant
				}
				row.Platforms = append(row.Platforms, pl)
			}
			if child, err := h.Registry.GetManifest(ctx, name, c.Digest.String()); err == nil {
				row.Size += int64(len(child.Content)) + imageSize(child)
			}
		}
		if refs, err := h.Registry.Referrers(ctx, name, m.Digest, ""); err == nil {
			for _, d := range refs {
				row.Referrers = append(row.Referrers, strings.TrimSpace(d.ArtifactType+" "+string(d.MediaType)))
			}
			slices.Sort(row.Referrers)
		}
		p.Tags = append(p.Tags, row)
	}
	render(w, "repository.html", p)
}

// imageSize is the bytes of an image manifest's config and layers.
func imageSize(m *manifest.Manifest) int64 {
	var n int64
	if m.Config != nil {
		n += m.Config.Size
	}
	for _, l := range m.Layers {
		n += l.Size
	}
	return n
}

func render(w http.ResponseWriter, page string, data any) {
	renderStatus(w, http.StatusOK, page, data)
}

// renderStatus answers status with page. Pages are never stored: they
// may show what only this visitor may see, or a robot key shown once.
func renderStatus(w http.ResponseWriter, status int, page string, data any) {
	var b strings.Builder
	if err := pages.ExecuteTemplate(&b, page, data); err != nil {
		http.Error(w, "rendering: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// Never framed, so that no other site can trick a click on a form.
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
	w.WriteHeader(status)
	w.Write([]byte(b.String()))
}
