// Package replicate copies images between this registry and peer
// registries (zot's sync, Harbor's replication): a push target sends this
// registry's repositories to its peer, a pull target brings the peer's
// into this registry through package registry, with a push's checks.
//
// What travels: manifests by digest, bytes unchanged (the same digest on
// the other side); an index's child manifests before the index; every
// blob a manifest names, unless the other side has it (HEAD first, then a
// cross-repository mount from a repository of the peer that holds it,
// then an upload); the tags; and the referrers of each image (signatures,
// SBOMs, from the referrers API or its tag-schema fallback), after their
// subject. Deletions do not travel.
//
// Life of a pass over one repository: its tags (filtered) are listed on
// the source and compared with the target's record (record.go: per
// repository, the tag → digest map last replicated and the manifests
// whose whole tree is on the other side), kept in the store under
// layout.ReplicationRecord. A tag whose digest moved, or whose tree is not
// done, is copied, children and blobs first, the tag last; the record is
// written after each image, so a crash redoes at most the image in flight
// (and what it finds on the other side costs a HEAD). Referrers are looked
// for on every pass, since they arrive after their subject.
//
// When passes run: each target has its own loop (not tasks of package
// task: it waits on events and its schedule and backs off from a failing
// peer, which would hold a worker idle). A full pass runs at start (to
// catch up with what changed while this process was down), then every
// interval; a push target with onpush also passes over each repository a
// push event names (Notify, fed by the API's events in process). An event
// only says where to look: what to copy comes from the record, so an
// event lost in a crash is made up by the pass at start. A failing pass
// is retried with backoff and logged; nothing in it blocks serving.
//
// Why not through the notification queue: its endpoints are webhooks fed
// from a bbolt file one process holds, delivering each event at least
// once; replication needs only the repository's name, and the record
// already makes a lost event harmless, so a second durable queue would
// only repeat the record (and need notifications configured).
//
// The peer is reached through the pull-through cache's client
// (proxy.Client): the same Basic and Bearer token flows and credentials.
package replicate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/proxy"
	"github.com/cairn-registry/cairn/internal/registry"
)

// Directions.
const (
	Push = "push" // this registry's images go to the peer
	Pull = "pull" // the peer's images come here
)

// Target is one peer and what travels to or from it.
type Target struct {
	// Name identifies the target (logs, metrics, its record in the store).
	Name      string
	Remote    proxy.Remote
	Direction string
	// Repositories and Tags select what travels.
	Repositories, Tags Filter
	// Interval runs a full pass this often (0: only at start).
	Interval time.Duration
	// OnPush passes over a repository when Notify hears of a push to it.
	OnPush bool
}

// Source is what a push target reads of this registry.
type Source interface {
	Repositories(ctx context.Context, n int, last string) ([]string, bool, error)
	Tags(ctx context.Context, repo string) ([]string, error)
	TagDigest(ctx context.Context, repo, tag string) (digest.Digest, error)
	StatManifest(ctx context.Context, repo, ref string) (*manifest.Manifest, error)
	Referrers(ctx context.Context, repo string, subject digest.Digest, artifactType string) ([]ocispec.Descriptor, error)
	StatBlob(ctx context.Context, repo string, d digest.Digest) (registry.BlobInfo, error)
	OpenBlob(ctx context.Context, d digest.Digest, info registry.BlobInfo, offset int64) (io.ReadCloser, error)
}

// Sink is what a pull target writes to this registry: the calls of a
// client's push, so that the same checks apply.
type Sink interface {
	StatManifest(ctx context.Context, repo, ref string) (*manifest.Manifest, error)
	PutManifest(ctx context.Context, repo, ref, contentType string, content []byte, extraTags []string) (*registry.PutResult, error)
	StatBlob(ctx context.Context, repo string, d digest.Digest) (registry.BlobInfo, error)
	MountBlob(ctx context.Context, repo string, d digest.Digest, from string) (bool, error)
	StartUpload(ctx context.Context, repo string) (string, error)
	FinishUpload(ctx context.Context, repo, id string, d digest.Digest, body io.Reader, start int64) (int64, error)
	CancelUpload(ctx context.Context, repo, id string) error
	MaxManifestSize() int64
}

// Local is this registry, both ways (registry.Registry implements it).
type Local interface {
	Source
	Sink
}

// Records is where the targets' records are kept: the store.
type Records interface {
	GetContent(ctx context.Context, path string) ([]byte, error)
	PutContent(ctx context.Context, path string, content []byte) error
}

// Metrics receives replication counts (metrics.Replication implements it).
type Metrics interface {
	ReplicatedManifests(target, direction string, n int)
	ReplicatedBytes(target, direction string, n int64)
	ReplicationPass(target string, failed bool)
}

// Options configure a Replicator.
type Options struct {
	Targets []Target
	Local   Local
	Records Records
	Metrics Metrics
	Log     *slog.Logger
	// Client reaches the peers (nil: proxy.NewClient's default).
	Client *http.Client
}

// Replicator runs the targets' passes.
type Replicator struct {
	targets []*target
	local   Local
	records Records
	metrics Metrics
	log     *slog.Logger
}

type target struct {
	Target
	peer peer
	wake chan struct{} // has one token when repositories were marked

	mu    sync.Mutex
	dirty map[string]bool // repositories push events named since the last pass
}

// New returns a Replicator for opts.Targets.
func New(opts Options) (*Replicator, error) {
	r := &Replicator{local: opts.Local, records: opts.Records, metrics: opts.Metrics, log: opts.Log}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.metrics == nil {
		r.metrics = nopMetrics{}
	}
	for _, t := range opts.Targets {
		if t.Direction != Push && t.Direction != Pull {
			return nil, fmt.Errorf("replicate: target %s: direction %q is not push or pull", t.Name, t.Direction)
		}
		c, err := proxy.NewClient(t.Remote, opts.Client)
		if err != nil {
			return nil, fmt.Errorf("replicate: target %s: %w", t.Name, err)
		}
		r.targets = append(r.targets, &target{Target: t, peer: peer{c}, wake: make(chan struct{}, 1), dirty: map[string]bool{}})
	}
	return r, nil
}

// OnPush reports whether any target replicates on push events (else
// Notify need not be called).
func (r *Replicator) OnPush() bool {
	return slices.ContainsFunc(r.targets, func(t *target) bool { return t.OnPush })
}

// Notify hears of the API's events (it is a server.Events): a manifest
// push marks its repository for the onpush targets that select it. It
// never blocks.
func (r *Replicator) Notify(ev notify.Event) {
	repo := ev.Target.Repository
	if ev.Action != notify.ActionPush || repo == "" || !isManifestType(ev.Target.MediaType) {
		return
	}
	for _, t := range r.targets {
		if !t.OnPush || !t.Repositories.Match(repo) {
			continue
		}
		t.mark(repo)
	}
}

// isManifestType tells a manifest push's event from a blob's, whose media
// type is application/octet-stream.
func isManifestType(mt string) bool {
	return mt != "" && mt != "application/octet-stream"
}

func (t *target) mark(repos ...string) {
	t.mu.Lock()
	for _, repo := range repos {
		t.dirty[repo] = true
	}
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// takeDirty returns the marked repositories and clears the marks.
func (t *target) takeDirty() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	repos := slices.Sorted(maps.Keys(t.dirty))
	clear(t.dirty)
	return repos
}

func (t *target) hasDirty() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty) > 0
}

// Summary tells what one pass of a target did.
type Summary struct {
	Target       string `json:"target"`
	Direction    string `json:"direction"`
	Repositories int    `json:"repositories"` // repositories looked at
	Tags         int    `json:"tags"`         // tags copied (new or moved)
	Manifests    int    `json:"manifests"`    // manifests copied: images, children, referrers
	Referrers    int    `json:"referrers"`    // of which referrers
	Blobs        int    `json:"blobs"`        // blobs copied (the other side lacked them)
	Mounted      int    `json:"mounted"`      // blobs mounted from another repository instead
	Bytes        int64  `json:"bytes"`        // blob bytes copied
	// Errors are the failures of the pass (at most maxErrors kept), and
	// Failed how many there were; Left are the repositories the pass did
	// not finish.
	Errors   []error       `json:"-"`
	Failed   int           `json:"failed"`
	Left     []string      `json:"unfinished,omitempty"`
	Duration time.Duration `json:"-"`
}

// Err joins the pass's errors; nil when it had none.
func (s *Summary) Err() error {
	if s.Failed == 0 {
		return nil
	}
	err := errors.Join(s.Errors...)
	if s.Failed > len(s.Errors) {
		err = fmt.Errorf("%w (and %d more)", err, s.Failed-len(s.Errors))
	}
	return err
}

// maxErrors bounds the errors a summary keeps, and those of one
// repository.
const maxErrors = 5

// joinSome joins the first maxErrors of errs and counts the others.
func joinSome(errs []error) error {
	if len(errs) <= maxErrors {
		return errors.Join(errs...)
	}
	return fmt.Errorf("%w (and %d more)", errors.Join(errs[:maxErrors]...), len(errs)-maxErrors)
}

func (s *Summary) fail(err error) {
	s.Failed++
	if len(s.Errors) < maxErrors {
		s.Errors = append(s.Errors, err)
	}
}

// Targets names the targets.
func (r *Replicator) Targets() []string {
	names := make([]string, len(r.targets))
	for i, t := range r.targets {
		names[i] = t.Name
	}
	return names
}

// RunOnce runs one full pass of the target named name ("": every target,
// one after the other) and returns what each did (cairn replicate run).
func (r *Replicator) RunOnce(ctx context.Context, name string) ([]Summary, error) {
	var out []Summary
	for _, t := range r.targets {
		if name != "" && t.Name != name {
			continue
		}
		out = append(out, r.pass(ctx, t, nil))
	}
	if name != "" && len(out) == 0 {
		return nil, fmt.Errorf("replicate: no target named %q", name)
	}
	return out, nil
}

// Run runs every target's loop until ctx ends.
func (r *Replicator) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, t := range r.targets {
		wg.Go(func() { r.loop(ctx, t) })
	}
	wg.Wait()
}

// Backoff bounds: a failing pass is retried after retryMin, doubling up
// to retryMax (or the target's interval when shorter: a scheduled pass
// would come then anyway).
const (
	retryMin = time.Second
	retryMax = 5 * time.Minute
)

func (t *target) backoff(failures int) time.Duration {
	limit := retryMax
	if t.Interval > 0 && t.Interval < limit {
		limit = t.Interval
	}
	d := retryMin
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// loop runs t's passes: a full one at start and every interval, one over
// the marked repositories when events mark some, retries after a failure
// once its backoff has passed (events meanwhile wait for it).
func (r *Replicator) loop(ctx context.Context, t *target) {
	var tick <-chan time.Time
	if t.Interval > 0 {
		ticker := time.NewTicker(t.Interval)
		defer ticker.Stop()
		tick = ticker.C
	}
	full, failures := true, 0
	var retryAt time.Time
	for ctx.Err() == nil {
		if (full || t.hasDirty()) && !time.Now().Before(retryAt) {
			var repos []string // nil: all
			if !full {
				repos = t.takeDirty()
			}
			sum := r.pass(ctx, t, repos)
			if ctx.Err() != nil {
				return
			}
			if err := sum.Err(); err != nil {
				failures++
				wait := t.backoff(failures)
				retryAt = time.Now().Add(wait)
				if !full {
					t.mark(sum.Left...)
				}
				r.log.Warn("replication: pass failed; retrying", "target", t.Name, "failures", failures, "retry_in", wait,
					"unfinished_repositories", len(sum.Left), "err", err)
				continue
			}
			if failures > 0 {
				r.log.Info("replication: target recovered", "target", t.Name, "failures", failures)
			}
			failures, retryAt, full = 0, time.Time{}, false
			continue
		}
		var retry <-chan time.Time
		var timer *time.Timer
		if !retryAt.IsZero() {
			timer = time.NewTimer(time.Until(retryAt))
			retry = timer.C
		}
		select {
		case <-ctx.Done():
		case <-tick:
			full = true
		case <-t.wake:
		case <-retry:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// pass replicates repos (nil: every repository the target selects) and
// logs and counts what it did.
func (r *Replicator) pass(ctx context.Context, t *target, repos []string) Summary {
	start := time.Now()
	sum := Summary{Target: t.Name, Direction: t.Direction}
	p := &pass{r: r, t: t, sum: &sum, mounts: map[digest.Digest]string{}}
	p.run(ctx, repos)
	sum.Duration = time.Since(start)
	r.metrics.ReplicatedManifests(t.Name, t.Direction, sum.Manifests)
	r.metrics.ReplicatedBytes(t.Name, t.Direction, sum.Bytes)
	r.metrics.ReplicationPass(t.Name, sum.Failed > 0)
	level := slog.LevelDebug // a pass with nothing to copy is the usual case
	if sum.Manifests > 0 || sum.Tags > 0 || sum.Failed > 0 {
		level = slog.LevelInfo
	}
	r.log.Log(ctx, level, "replication: pass", "target", t.Name, "direction", t.Direction, "repositories", sum.Repositories,
		"tags", sum.Tags, "manifests", sum.Manifests, "referrers", sum.Referrers, "blobs", sum.Blobs,
		"mounted", sum.Mounted, "bytes", sum.Bytes, "failed", sum.Failed, "duration", sum.Duration)
	return sum
}

// pass is one pass of a target.
type pass struct {
	r   *Replicator
	t   *target
	sum *Summary
	// mounts: a repository of the peer known to hold each blob (push),
	// for cross-repository mounts.
	mounts map[digest.Digest]string
}

func (p *pass) run(ctx context.Context, repos []string) {
	// No ping first: a peer that is down is found by the first request
	// that needs it, and a pass with nothing to copy does not need it.
	if repos == nil {
		var err error
		if repos, err = p.repositories(ctx); err != nil {
			p.sum.fail(err)
			return
		}
	}
	for i, repo := range repos {
		if ctx.Err() != nil {
			p.sum.Left = repos[i:]
			return
		}
		p.sum.Repositories++
		err := p.repo(ctx, repo)
		if err == nil {
			continue
		}
		p.sum.fail(fmt.Errorf("%s: %w", repo, err))
		if unreachable(err) {
			// The peer went away: the rest waits for the retry.
			p.sum.Left = repos[i:]
			return
		}
		p.sum.Left = append(p.sum.Left, repo)
	}
}

// unreachable tells a peer that cannot be reached or fails (transport
// errors, 5xx, 429) from one that refused one image.
func unreachable(err error) bool { return errors.Is(err, proxy.ErrUpstream) }

// repositories lists what the target selects: this registry's
// repositories for push; for pull, the include patterns when all are
// plain names (no catalog needed), else the peer's catalog.
func (p *pass) repositories(ctx context.Context) ([]string, error) {
	var all []string
	switch {
	case p.t.Direction == Push:
		names, _, err := p.r.local.Repositories(ctx, -1, "")
		if err != nil {
			return nil, fmt.Errorf("listing repositories: %w", err)
		}
		all = names
	case p.t.Repositories.literal():
		all = p.t.Repositories.includes
	default:
		names, err := p.t.peer.catalog(ctx)
		if err != nil {
			return nil, err
		}
		all = names
	}
	return slices.DeleteFunc(all, func(repo string) bool { return !p.t.Repositories.Match(repo) }), nil
}

// repo replicates one repository, loading its record first.
func (p *pass) repo(ctx context.Context, repo string) error {
	rec, err := loadRecord(ctx, p.r.records, p.t.Name, repo)
	if err != nil {
		return err
	}
	s := &repoSync{pass: p, repo: repo, rec: rec, seen: map[digest.Digest]bool{}}
	if p.t.Direction == Push {
		err = s.push(ctx)
	} else {
		err = s.pull(ctx)
	}
	if err == nil && ctx.Err() == nil {
		// Only a complete pass knows what is gone from the source.
		if s.rec.prune(s.seen, s.tags) {
			s.dirty = true
		}
	}
	if serr := s.save(ctx); serr != nil && err == nil {
		err = serr
	}
	return err
}

// repoSync is the pass over one repository.
type repoSync struct {
	*pass
	repo  string
	rec   *record
	seen  map[digest.Digest]bool // manifests the source holds now (tags' trees, referrers)
	tags  []string               // the selected tags of the source
	dirty bool                   // rec changed since saved
}

func (s *repoSync) save(ctx context.Context) error {
	if !s.dirty {
		return nil
	}
	if err := s.rec.save(ctx, s.r.records, s.t.Name, s.repo); err != nil {
		return err
	}
	s.dirty = false
	return nil
}

// done records that the whole tree of d is on the other side (and, with
// tag, that tag names it there), and writes the record.
func (s *repoSync) done(ctx context.Context, d digest.Digest, tag string) error {
	s.rec.done[d] = true
	if tag != "" {
		s.rec.Tags[tag] = d
	}
	s.dirty = true
	return s.save(ctx)
}

// maxReferrerDepth bounds how far referrers of referrers are followed (a
// signature of an SBOM of an image is two).
const maxReferrerDepth = 4

// referrerTag is the OCI tag-schema fallback's tag for subject d's
// referrers index: <alg>-<hex>.
func referrerTag(d digest.Digest) string {
	return string(d.Algorithm()) + "-" + d.Encoded()
}

// Filter selects names by include and exclude patterns.
type Filter struct {
	include, exclude []*regexp.Regexp
	includes         []string // as written
}

// NewRepoFilter compiles repository patterns (layout.RepoPattern's: "**",
// "*", "?").
func NewRepoFilter(include, exclude []string) (Filter, error) {
	return newFilter(include, exclude, layout.RepoPattern)
}

// NewTagFilter compiles tag patterns: "*" any run of characters, "?" one.
func NewTagFilter(include, exclude []string) (Filter, error) {
	return newFilter(include, exclude, tagPattern)
}

func newFilter(include, exclude []string, compile func(string) (*regexp.Regexp, error)) (Filter, error) {
	f := Filter{includes: slices.Clone(include)}
	for _, p := range include {
		re, err := compile(p)
		if err != nil {
			return Filter{}, err
		}
		f.include = append(f.include, re)
	}
	for _, p := range exclude {
		re, err := compile(p)
		if err != nil {
			return Filter{}, err
		}
		f.exclude = append(f.exclude, re)
	}
	return f, nil
}

// Match reports whether name is included (or there are no includes) and
// not excluded.
func (f Filter) Match(name string) bool {
	match := func(res []*regexp.Regexp) bool {
		return slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(name) })
	}
	return (len(f.include) == 0 || match(f.include)) && !match(f.exclude)
}

// literal reports whether the includes are all plain names.
func (f Filter) literal() bool {
	return len(f.includes) > 0 && !slices.ContainsFunc(f.includes, func(p string) bool { return strings.ContainsAny(p, "*?") })
}

func tagPattern(p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, errors.New("empty tag pattern")
	}
	var b strings.Builder
	b.WriteString("^")
	for _, c := range p {
		switch c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

type nopMetrics struct{}

func (nopMetrics) ReplicatedManifests(string, string, int) {}
func (nopMetrics) ReplicatedBytes(string, string, int64)   {}
func (nopMetrics) ReplicationPass(string, bool)            {}

// direction is one way images travel: where a tag's digest is read
// (resolve: ok false when the tag is gone since it was listed), how a
// manifest's tree is copied, where the referrers of a subject are listed,
// and which error of tree says the manifest is gone since it was listed.
type direction struct {
	resolve   func(ctx context.Context, tag string) (d digest.Digest, ok bool, err error)
	tree      func(ctx context.Context, d digest.Digest, tag string) error
	referrers func(ctx context.Context, subject digest.Digest) ([]ocispec.Descriptor, error)
	gone      func(error) bool
}

// syncTags copies the selected tags of the repository, and their
// referrers, in dir. One image's failure does not stop the others; an
// unreachable peer does.
func (s *repoSync) syncTags(ctx context.Context, tags []string, dir direction) error {
	var errs []error
	for _, tag := range tags {
		if !s.t.Tags.Match(tag) || ctx.Err() != nil {
			continue
		}
		d, ok, err := dir.resolve(ctx, tag)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		s.tags = append(s.tags, tag)
		if err := s.syncImage(ctx, tag, d, dir); err != nil {
			if unreachable(err) {
				return err
			}
			errs = append(errs, fmt.Errorf("tag %s: %w", tag, err))
		}
	}
	if err := joinSome(errs); err != nil {
		return err
	}
	return ctx.Err()
}

// syncImage copies tag (naming d) unless the record says it arrived, then
// the referrers of d and of its children.
func (s *repoSync) syncImage(ctx context.Context, tag string, d digest.Digest, dir direction) error {
	if s.rec.Tags[tag] != d || !s.rec.done[d] {
		if err := dir.tree(ctx, d, tag); err != nil {
			return err
		}
		s.sum.Tags++
		if err := s.done(ctx, d, tag); err != nil {
			return err
		}
	}
	return s.syncReferrers(ctx, d, dir, 0)
}

// syncReferrers copies the referrers of d not yet copied, after d, and
// theirs in turn; for an index, its children's too.
func (s *repoSync) syncReferrers(ctx context.Context, d digest.Digest, dir direction, depth int) error {
	if depth > maxReferrerDepth {
		return nil
	}
	subjects := []digest.Digest{d}
	if m, err := s.r.local.StatManifest(ctx, s.repo, d.String()); err == nil && m.IsIndex() {
		refs, _ := m.Refs()
		subjects = append(subjects, refs.Manifests...)
	}
	for _, subject := range subjects {
		s.seen[subject] = true
		descs, err := dir.referrers(ctx, subject)
		if err != nil {
			return fmt.Errorf("referrers of %s: %w", subject, err)
		}
		for _, desc := range descs {
			if desc.Digest.Validate() != nil {
				continue // a peer's answer is not trusted
			}
			if !s.rec.done[desc.Digest] {
				if err := dir.tree(ctx, desc.Digest, ""); err != nil {
					if dir.gone(err) {
						continue // deleted since listed
					}
					return fmt.Errorf("referrer %s of %s: %w", desc.Digest, subject, err)
				}
				s.sum.Referrers++
				if err := s.done(ctx, desc.Digest, ""); err != nil {
					return err
				}
			}
			s.seen[desc.Digest] = true
			if err := s.syncReferrers(ctx, desc.Digest, dir, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
