// Package registry is cairn's registry logic over a storage driver:
// repositories, blobs, uploads, manifests, tags and referrers, stored in
// distribution's path layout. It knows nothing of HTTP.
//
// Lifecycle of content:
//   - An upload is written under the repository's _uploads/<id>; it is never
//     readable as a blob. On completion it is verified against the client's
//     digest and moved into blobs/ atomically, then linked into the repository.
//   - A manifest is stored as a blob, then its revision link is written, then
//     its tags; a reader finds a tag only once everything it names exists.
//   - Deleting removes links; blob data goes only through garbage collection.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/layout"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// DefaultMaxManifestSize is the largest manifest accepted, as distribution.
const DefaultMaxManifestSize = 4 << 20

// Options tune a Registry.
type Options struct {
	// DeleteEnabled allows deleting blobs, manifests and tags.
	DeleteEnabled bool
	// MaxManifestSize bounds a manifest PUT body; 0 means the default.
	MaxManifestSize int64
	// SparseManifests accepts manifests whose config, layers or index
	// children were never pushed (mirrors of some platforms or layers).
	SparseManifests bool
	// Mirrored, when set, names the repositories of a pull-through cache:
	// their manifests are stored before their blobs are fetched, so they
	// are sparse too.
	Mirrored func(repo string) bool
	// IndexPlatforms selects the index children that must exist: "all" (or
	// ""), "none", or "list" (children whose platform is in PlatformList,
	// and children without a platform).
	IndexPlatforms string
	PlatformList   []ocispec.Platform
	// Dedup, when set, serves blobs whose intact bytes dedup removed.
	Dedup DedupSource
	// Observer, when set, learns about pushes and pulls.
	Observer Observer
	// Redirector, when set, hands out the URLs intact blobs are fetched
	// from instead of through cairn (see BlobRedirectURL).
	Redirector Redirector
	// MaxUploadChunks bounds the chunks of one upload session; 0 means
	// DefaultMaxUploadChunks.
	MaxUploadChunks int
	// LayerURLs, when set, checks the urls of pushed image manifests'
	// layers (distribution's validation.manifests.urls).
	LayerURLs *URLRules
	// TagLookups bounds the tag links read at once when a manifest delete
	// looks for the tags naming it; 0 means GOMAXPROCS.
	TagLookups int
	// Descriptors, when set, caches what StatBlob found (see
	// DescriptorCache).
	Descriptors DescriptorCache
	// ManifestClasses, when set, are the only classes of image manifests a
	// push may store (distribution's policy.repository.classes): "image"
	// for image configs, "plugin" for Docker plugin configs; a manifest
	// whose config is of another type is refused, indexes are not checked.
	ManifestClasses []string
	// ManifestCacheSize bounds, in bytes, the memory that keeps recently
	// served manifests and links (see manifestCache); 0 caches nothing.
	ManifestCacheSize int64
	// TagTTL is how long a tag or revision link read from storage is
	// trusted: a change made through another node sharing the storage is
	// seen within it. 0 reads links on every request (manifests by digest
	// are still cached).
	TagTTL time.Duration
	// LinkVersions, when set, tells this node of link writes through any
	// node sharing the storage the moment they happen (see LinkVersions):
	// TagTTL is then only an upper bound.
	LinkVersions LinkVersions
	// Log receives what a request cannot report to its client (a link
	// version that could not be bumped); nil discards it.
	Log *slog.Logger
	// SyncBlobs makes every blob durable before its upload completes, as
	// distribution does. Without it, on a filesystem, a blob is made
	// durable in the background and at the latest before a manifest that
	// names it is stored (see seal.go).
	SyncBlobs bool
	// Parser, when set, counts the manifests the registry parses (a test
	// shows a push parses its body once); nil parses without counting.
	Parser *manifest.Parser
}

// DescriptorCache remembers that a blob is linked into a repository and its
// size, so that StatBlob skips the link read and the stat. It is a hint:
// only the read paths (HEAD and GET of blobs) consult it, never a writer,
// and a GET that finds the data gone forgets the entry.
type DescriptorCache interface {
	Lookup(ctx context.Context, repo string, d digest.Digest) (size int64, ok bool)
	Remember(ctx context.Context, repo string, d digest.Digest, size int64)
	Forget(ctx context.Context, repo string, d digest.Digest)
}

// LinkVersions counts the writes to each repository's links where every
// node sharing the storage reads them (linkversion.Redis). A node trusts a
// cached link only while the repository's version is the one it read
// before reading the link, so a write through any node voids it at once.
// When Version fails the cache is bypassed; when Bump fails the other
// nodes see the write within TagTTL.
type LinkVersions interface {
	Version(ctx context.Context, repo string) (string, error)
	// Bump follows a write to repo's links; BumpAll a write to the links
	// of any repository (a garbage collection).
	Bump(ctx context.Context, repo string) error
	BumpAll(ctx context.Context) error
}

// URLRules is distribution's rule for the urls of layer descriptors: each
// must be http or https without a fragment, match Allow (when set) and not
// match Deny (when set).
type URLRules struct {
	Allow, Deny *regexp.Regexp
}

// check returns an error naming the first URL the rules refuse.
func (u *URLRules) check(field string, urls []string) error {
	for _, s := range urls {
		pu, err := url.Parse(s)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Fragment != "" ||
			(u.Allow != nil && !u.Allow.MatchString(s)) || (u.Deny != nil && u.Deny.MatchString(s)) {
			return fmt.Errorf("%w: %s: url %q is not allowed (validation.manifests.urls)", ErrManifestInvalid, field, s)
		}
	}
	return nil
}

// Registry serves repositories stored through one driver.
type Registry struct {
	d        driver.Driver
	opts     Options
	sessions sessionLocks
	// owner names the upload chunk objects this Registry creates; only
	// it appends to them (see uploads.go).
	owner string
	// appendInPlace: d is a driver.InPlaceAppender; epoch is its
	// CacheEpoch, and when it is known chunks are not synced one by one.
	appendInPlace bool
	epoch         string
	// cache is d's InPlaceAppender when its epoch is known; seals tracks
	// the blobs stored without a sync (nil: every blob is synced first).
	cache     driver.InPlaceAppender
	seals     *sealer
	manifests *manifestCache // nil: nothing cached
}

// New returns a Registry over d.
func New(d driver.Driver, opts Options) *Registry {
	if opts.MaxManifestSize <= 0 {
		opts.MaxManifestSize = DefaultMaxManifestSize
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.MaxUploadChunks <= 0 {
		opts.MaxUploadChunks = DefaultMaxUploadChunks
	}
	ipa, inPlace := driver.As[driver.InPlaceAppender](d)
	epoch := ""
	if inPlace {
		epoch = ipa.CacheEpoch()
	}
	r := &Registry{
		d: d, opts: opts, owner: newOwnerID(), appendInPlace: inPlace, epoch: epoch,
		manifests: newManifestCache(opts.ManifestCacheSize, opts.TagTTL),
	}
	if epoch != "" {
		r.cache = ipa
		if !opts.SyncBlobs {
			r.seals = newSealer()
		}
	}
	return r
}

// Driver returns the storage driver, for callers that need to reach storage
// directly (health checks, maintenance).
func (r *Registry) Driver() driver.Driver { return r.d }

// MaxManifestSize is the largest manifest body PutManifest accepts.
func (r *Registry) MaxManifestSize() int64 { return r.opts.MaxManifestSize }

// readLink reads a link file and parses the digest it holds.
func (r *Registry) readLink(ctx context.Context, path string) (digest.Digest, error) {
	b, err := r.d.GetContent(ctx, path)
	if err != nil {
		return "", err
	}
	d, err := digest.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return "", fmt.Errorf("malformed link %s: %w", path, err)
	}
	return d, nil
}

func (r *Registry) writeLink(ctx context.Context, path string, d digest.Digest) error {
	return r.d.PutContent(ctx, path, []byte(d))
}

// exists reports whether the file at path exists; errors other than
// not-found are returned, never taken as "absent". Every caller asks about
// a file (a link, blob data, a recipe), so it uses driver.StatFile: on an
// object store a missing file then costs one request, not a HEAD and a LIST.
func (r *Registry) exists(ctx context.Context, path string) (bool, error) {
	return found(driver.StatFile(ctx, r.d, path))
}

// found turns a stat's answer into whether the path exists.
func found(_ driver.FileInfo, err error) (bool, error) {
	if err == nil {
		return true, nil
	}
	if errors.Is(err, driver.ErrNotFound) {
		return false, nil
	}
	return false, err
}

// RepositoryExists reports whether anything is stored for repo: a
// directory, hence Stat.
func (r *Registry) RepositoryExists(ctx context.Context, repo string) (bool, error) {
	return found(r.d.Stat(ctx, layout.Repo(repo)))
}
