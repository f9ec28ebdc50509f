// Package proxy is the pull-through cache: repositories under a configured
// prefix mirror an upstream registry, filled on demand as clients pull.
//
// The life of mirrored content:
//
//   - A manifest GET by tag is served from the cache while the tag was
//     checked with the upstream within the revalidation interval. Else a
//     HEAD asks the upstream which digest the tag names now (registries such
//     as Docker Hub do not count HEADs against pull limits): the cached one
//     is served; another is fetched, checked against its digest, stored and
//     tagged; with the upstream unreachable or failing, the cached copy is
//     served. A manifest by digest is content-addressed: cached, or fetched
//     once and stored.
//   - A blob GET of a blob the repository links is served as any blob. One
//     stored for another repository is linked, with no upstream request.
//     Otherwise it is fetched once per digest however many clients ask: the
//     bytes are spooled on local disk (an unlinked file, so a crash leaves
//     nothing) as they arrive, every client streams from the spool at once,
//     and when all of them matched the digest the spool is stored as a
//     pushed blob would be and linked into each repository that asked.
//     Bytes that do not match are never stored.
//   - Stored content is ordinary registry content: the GC and dedup treat
//     it as pushed content. Manifests are stored sparse (their blobs come
//     when pulled). Content nobody pulled within the upstream's TTL expires
//     (expire.go), and the GC frees only the blobs nothing else names.
//   - Pushes to a mirrored repository are refused: it belongs to the
//     upstream.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/registry"
)

// Upstream configures one mirrored registry.
type Upstream struct {
	// Prefix selects the repositories it serves ("docker.io" serves
	// docker.io/library/alpine as library/alpine upstream); "" serves
	// every repository under its own name (distribution's proxy).
	Prefix string
	// URL is the upstream registry's base URL.
	URL string
	// Username and Password authenticate to it (Basic, or to its token
	// server); empty pulls anonymously.
	Username, Password string
	// CredentialHelper, when set, is a Docker credential helper that gives
	// the credentials instead, asked again after HelperLifetime (0: kept
	// for ever, negative: asked every time).
	CredentialHelper string
	HelperLifetime   time.Duration
	// Revalidate is how long a tag checked with the upstream is served
	// without asking again.
	Revalidate time.Duration
	// TTL expires cached content nobody pulled for this long (see Expire);
	// 0 keeps it.
	TTL time.Duration
}

// Store is what the cache needs of the registry: the manifests it serves
// and stores, and the blobs. Expiry needs more, and asks for it
// (expiryStore) only if the store has it.
type Store interface {
	Manifests
	Blobs
}

// Manifests is what Cache.Manifest needs of the registry's manifests.
type Manifests interface {
	StatManifest(ctx context.Context, repo, ref string) (*manifest.Manifest, error)
	GetManifest(ctx context.Context, repo, ref string) (*manifest.Manifest, error)
	PutManifest(ctx context.Context, repo, ref, contentType string, content []byte, extraTags []string) (*registry.PutResult, error)
	MaxManifestSize() int64
}

// Blobs is what the blob paths (blobs.go) need of the registry's blobs:
// reads, mounts across repositories, and the upload that stores a blob
// fetched from the upstream.
type Blobs interface {
	StatBlob(ctx context.Context, repo string, d digest.Digest) (registry.BlobInfo, error)
	OpenBlob(ctx context.Context, d digest.Digest, info registry.BlobInfo, offset int64) (io.ReadCloser, error)
	MountBlob(ctx context.Context, repo string, d digest.Digest, from string) (bool, error)
	StartUpload(ctx context.Context, repo string) (string, error)
	FinishUpload(ctx context.Context, repo, id string, d digest.Digest, body io.Reader, start int64) (int64, error)
	CancelUpload(ctx context.Context, repo, id string) error
}

// Options configure a Cache.
type Options struct {
	Upstreams []Upstream
	// SpoolDir holds blobs while they are fetched ("" for the system's
	// temporary directory).
	SpoolDir string
	// Client reaches the upstreams (nil: a client with generous timeouts).
	Client *http.Client
	Log    *slog.Logger
}

// Cache is the pull-through cache over a Store.
type Cache struct {
	manifests Manifests
	blobs     Blobs
	expiry    expiryStore // nil: the store cannot expire content
	mirrors   []*mirror   // longest prefix first
	spoolDir  string
	log       *slog.Logger

	mu      sync.Mutex
	checked map[string]time.Time // repo + ":" + tag → last check with the upstream
	flights map[digest.Digest]*flight
}

type mirror struct {
	Upstream
	up        *upstream
	dockerHub bool
}

// New returns a Cache for opts.Upstreams over store.
func New(store Store, opts Options) (*Cache, error) {
	hc := opts.Client
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = 2 * time.Minute
		hc = &http.Client{Transport: tr}
	}
	expiry, _ := store.(expiryStore)
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cache{manifests: store, blobs: store, expiry: expiry, spoolDir: opts.SpoolDir, log: log, checked: make(map[string]time.Time), flights: make(map[digest.Digest]*flight)}
	for _, u := range opts.Upstreams {
		base, err := url.Parse(u.URL)
		if err != nil || base.Host == "" || (base.Scheme != "http" && base.Scheme != "https") {
			return nil, fmt.Errorf("proxy: upstream %q: not an http(s) URL", u.URL)
		}
		u.Prefix = strings.Trim(u.Prefix, "/")
		for _, m := range c.mirrors {
			if m.Prefix == u.Prefix {
				return nil, fmt.Errorf("proxy: two upstreams for prefix %q", u.Prefix)
			}
		}
		host := base.Hostname()
		up := newUpstream(base, u.Username, u.Password, hc)
		if u.CredentialHelper != "" {
			up.helper = &credHelper{command: u.CredentialHelper, lifetime: u.HelperLifetime}
		}
		c.mirrors = append(c.mirrors, &mirror{Upstream: u, up: up,
			dockerHub: host == "registry-1.docker.io" || host == "docker.io" || host == "index.docker.io"})
	}
	slices.SortFunc(c.mirrors, func(a, b *mirror) int { return len(b.Prefix) - len(a.Prefix) })
	return c, nil
}

// Mirrors reports whether repo belongs to an upstream.
func (c *Cache) Mirrors(repo string) bool {
	_, _, ok := c.route(repo)
	return ok
}

// route finds repo's upstream and its name there.
func (c *Cache) route(repo string) (*mirror, string, bool) {
	for _, m := range c.mirrors {
		name := repo
		if m.Prefix != "" {
			rest, ok := strings.CutPrefix(repo, m.Prefix+"/")
			if !ok {
				continue
			}
			name = rest
		}
		if m.dockerHub && !strings.Contains(name, "/") {
			name = "library/" + name // Docker Hub's official images
		}
		return m, name, true
	}
	return nil, "", false
}

// ErrMirrored refuses a push to a mirrored repository; it wraps
// registry.ErrUnsupported (405 UNSUPPORTED).
var ErrMirrored = fmt.Errorf("%w: the repository mirrors an upstream registry; pushes are refused", registry.ErrUnsupported)

// Manifest answers a GET (head false) or HEAD of manifest ref in the
// mirrored repo, from the cache or the upstream as the package doc tells.
func (c *Cache) Manifest(ctx context.Context, repo, ref string, head bool) (*manifest.Manifest, error) {
	m, name, ok := c.route(repo)
	if !ok {
		return nil, fmt.Errorf("proxy: %s is not mirrored", repo)
	}
	local := c.manifests.GetManifest
	if head {
		local = c.manifests.StatManifest
	}
	cached, err := local(ctx, repo, ref)
	if err != nil && !errors.Is(err, registry.ErrManifestUnknown) && !errors.Is(err, registry.ErrNameUnknown) {
		return nil, err
	}
	byDigest := isDigest(ref)
	if cached != nil && byDigest {
		if !c.fresh(repo, ref, m.Revalidate) {
			// Still pulled: not to expire (once per interval).
			c.touch(ctx, repo, ref, cached.Digest)
		}
		return cached, nil
	}
	if cached != nil && c.fresh(repo, ref, m.Revalidate) {
		return cached, nil
	}
	want := digest.Digest("")
	if !byDigest {
		if cached != nil {
			d, err := m.up.manifestDigest(ctx, name, ref)
			switch {
			case err == nil && d == cached.Digest:
				c.touch(ctx, repo, ref, cached.Digest)
				return cached, nil
			case errors.Is(err, ErrUpstream):
				c.log.Warn("proxy: upstream unreachable; serving the cached manifest", "repo", repo, "ref", ref, "err", err)
				return cached, nil
			case errors.Is(err, errNotFound):
				// Gone upstream: the cached tag is still what we have.
				c.log.Info("proxy: tag gone upstream; serving the cached manifest", "repo", repo, "ref", ref)
				c.touch(ctx, repo, ref, cached.Digest)
				return cached, nil
			}
			want = d
		}
	}
	fetchRef := ref
	if want != "" {
		fetchRef = want.String()
	}
	content, mediaType, d, err := m.up.manifest(ctx, name, fetchRef, c.manifests.MaxManifestSize())
	switch {
	case errors.Is(err, errNotFound):
		return nil, fmt.Errorf("%w: %s:%s", registry.ErrManifestUnknown, repo, ref)
	case err != nil:
		return nil, err
	}
	if mediaType == "" || strings.HasPrefix(mediaType, "text/plain") || mediaType == "application/octet-stream" {
		mediaType = "" // let the registry tell it from the content
	}
	storeRef := d.String()
	if !byDigest {
		storeRef = ref
	}
	if _, err := c.manifests.PutManifest(ctx, repo, storeRef, mediaType, content, nil); err != nil {
		return nil, fmt.Errorf("proxy: storing manifest %s:%s from upstream: %w", repo, ref, err)
	}
	c.markChecked(repo, ref)
	if head {
		return c.manifests.StatManifest(ctx, repo, d.String())
	}
	return c.manifests.GetManifest(ctx, repo, d.String())
}

func isDigest(ref string) bool { return strings.Contains(ref, ":") }

// touch records that ref (a tag, or a digest) was checked or pulled now:
// in memory for revalidation, and in its link for expiry.
func (c *Cache) touch(ctx context.Context, repo, ref string, d digest.Digest) {
	c.markChecked(repo, ref)
	if c.expiry != nil {
		if err := c.expiry.Touch(ctx, repo, ref, d); err != nil {
			c.log.Warn("proxy: recording a pull for expiry", "repo", repo, "ref", ref, "err", err)
		}
	}
}

// fresh reports whether tag was checked with the upstream within every.
func (c *Cache) fresh(repo, tag string, every time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.checked[repo+":"+tag]
	return ok && time.Since(at) < every
}

// maxChecked bounds the revalidation records; past it the oldest half is
// forgotten (those tags are checked again on their next pull).
const maxChecked = 100_000

func (c *Cache) markChecked(repo, tag string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.checked) >= maxChecked {
		times := make([]time.Time, 0, len(c.checked))
		for _, t := range c.checked {
			times = append(times, t)
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		cut := times[len(times)/2]
		for k, t := range c.checked {
			if !t.After(cut) {
				delete(c.checked, k)
			}
		}
	}
	c.checked[repo+":"+tag] = time.Now()
}
