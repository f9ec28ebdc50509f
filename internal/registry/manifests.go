package registry

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/fence"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/parallel"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// ParseReference splits a manifest reference into a tag or a digest.
func ParseReference(ref string) (tag string, d digest.Digest, err error) {
	if strings.Contains(ref, ":") {
		d, err = ParseDigest(ref)
		return "", d, err
	}
	if !ValidTag(ref) {
		return "", "", fmt.Errorf("%w: %q", ErrTagInvalid, ref)
	}
	return ref, "", nil
}

// resolve turns a reference into the digest of a manifest stored in repo.
func (r *Registry) resolve(ctx context.Context, repo, ref string) (digest.Digest, error) {
	tag, d, err := ParseReference(ref)
	if err != nil {
		return "", err
	}
	ver, cached := r.linkVersion(ctx, repo)
	if tag != "" {
		d, err = r.cachedLink(repo, tagKey(repo, tag), ver, cached, func() (digest.Digest, error) {
			return r.readLink(ctx, layout.TagCurrentLink(repo, tag))
		})
		if errors.Is(err, driver.ErrNotFound) {
			return "", r.unknownManifest(ctx, repo, ref)
		}
		if err != nil {
			return "", err
		}
	}
	_, err = r.cachedLink(repo, revisionKey(repo, d), ver, cached, func() (digest.Digest, error) {
		ok, err := r.exists(ctx, layout.RevisionLink(repo, d))
		if err == nil && !ok {
			err = errNoRevision
		}
		return d, err
	})
	if errors.Is(err, errNoRevision) {
		return "", r.unknownManifest(ctx, repo, ref)
	}
	if err != nil {
		return "", err
	}
	return d, nil
}

// errNoRevision: the repository has no revision link for the digest.
var errNoRevision = errors.New("no such revision")

// linkVersion returns repo's shared link version ("" without
// LinkVersions), read before any link, and whether cached links may be
// used: not without a cache, nor when the version cannot be read.
func (r *Registry) linkVersion(ctx context.Context, repo string) (string, bool) {
	if r.manifests == nil {
		return "", false
	}
	if r.opts.LinkVersions == nil {
		return "", true
	}
	ver, err := r.opts.LinkVersions.Version(ctx, repo)
	return ver, err == nil
}

// cachedLink returns the digest of the link entry key of repo from the
// manifest cache while it is fresh at shared version ver, else from read,
// caching its answer; with cached false it only reads.
func (r *Registry) cachedLink(repo, key, ver string, cached bool, read func() (digest.Digest, error)) (digest.Digest, error) {
	c := r.manifests
	if !cached {
		return read()
	}
	if d, ok := c.link(repo, key, ver); ok {
		return d, nil
	}
	// Generation and time are taken before the read, so an entry is never
	// fresher than what storage held when it was read (ver was too).
	gen, at := c.generation(repo), time.Now()
	d, err := read()
	if err == nil {
		c.addLink(key, d, at, gen, ver)
	}
	return d, err
}

// ForgetLinks voids every cached tag and revision link, here and, with
// LinkVersions, on every node: for a writer that changed links beside the
// Registry (a garbage collection). Cached manifests stay: a digest names
// its bytes forever.
func (r *Registry) ForgetLinks(ctx context.Context) {
	if r.manifests != nil {
		r.manifests.forgetLinks()
	}
	if v := r.opts.LinkVersions; v != nil {
		ctx, cancel := bumpContext(ctx)
		defer cancel()
		if err := v.BumpAll(ctx); err != nil {
			r.opts.Log.Warn("other nodes see the links this garbage collection deleted within storage.cache.manifests.tagttl", "err", err)
		}
	}
}

// bumpContext outlives ctx's cancellation: a client gone (or a GC stopped)
// after a write must not keep the other nodes from seeing it.
func bumpContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// manifestsChanged voids the cached links of repo after a write to them,
// here and, with LinkVersions, on every node.
func (r *Registry) manifestsChanged(ctx context.Context, repo string) {
	if r.manifests != nil {
		r.manifests.changed(repo)
	}
	if v := r.opts.LinkVersions; v != nil {
		ctx, cancel := bumpContext(ctx)
		defer cancel()
		if err := v.Bump(ctx, repo); err != nil {
			r.opts.Log.Warn("other nodes see this write to the repository's links within storage.cache.manifests.tagttl", "repo", repo, "err", err)
		}
	}
}

// unknownManifest says NAME_UNKNOWN for a missing repository, else
// MANIFEST_UNKNOWN.
func (r *Registry) unknownManifest(ctx context.Context, repo, ref string) error {
	if ok, err := r.RepositoryExists(ctx, repo); err == nil && !ok {
		return fmt.Errorf("%w: %s", ErrNameUnknown, repo)
	}
	return fmt.Errorf("%w: %s", ErrManifestUnknown, ref)
}

// GetManifest returns the manifest ref (a tag or digest) of repo, parsed,
// and reports the pull to the Observer.
func (r *Registry) GetManifest(ctx context.Context, repo, ref string) (*manifest.Manifest, error) {
	m, err := r.StatManifest(ctx, repo, ref)
	if err == nil && r.opts.Observer != nil {
		r.opts.Observer.ManifestPulled(ctx, ClientFrom(ctx), m)
	}
	return m, err
}

// StatManifest is GetManifest without reporting a pull (HEAD).
func (r *Registry) StatManifest(ctx context.Context, repo, ref string) (*manifest.Manifest, error) {
	d, err := r.resolve(ctx, repo, ref)
	if err != nil {
		return nil, err
	}
	if r.manifests != nil {
		if m, ok := r.manifests.manifest(d); ok {
			return m, nil
		}
	}
	content, err := r.d.GetContent(ctx, layout.BlobData(d))
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s (revision without data)", ErrManifestUnknown, ref)
	}
	if err != nil {
		return nil, err
	}
	m, err := r.opts.Parser.Parse(d, content)
	if err != nil {
		// Stored bytes that do not parse are served as they are.
		m = &manifest.Manifest{Digest: d, Content: content, MediaType: ocispec.MediaTypeImageManifest}
	}
	if r.manifests != nil {
		r.manifests.addManifest(m)
	}
	return m, nil
}

// MaxExtraTags bounds the tags one manifest PUT may set with ?tag=: each
// costs a few synced writes, and 2000 of them held a request for seconds.
const MaxExtraTags = 100

// PutResult tells what a manifest push stored.
type PutResult struct {
	Digest  digest.Digest
	Subject digest.Digest // "" when the manifest has no subject
	Tags    []string      // the tags now pointing at it
	// Manifest is the pushed manifest as parsed, for the caller to use
	// rather than parse the body again (the request's events).
	Manifest *manifest.Manifest
}

// PutManifest validates and stores a manifest pushed as ref (a tag or a
// digest), and tags it with ref (when a tag) and every extra tag. Nothing is
// stored unless the whole manifest is valid and every blob it names exists
// in repo.
func (r *Registry) PutManifest(ctx context.Context, repo, ref, contentType string, content []byte, extraTags []string) (*PutResult, error) {
	if int64(len(content)) > r.opts.MaxManifestSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrManifestTooLarge, len(content), r.opts.MaxManifestSize)
	}
	tag, want, err := ParseReference(ref)
	if err != nil {
		return nil, err
	}
	if len(extraTags) > MaxExtraTags {
		return nil, fmt.Errorf("%w: %d tags in one push, at most %d", ErrTagInvalid, len(extraTags), MaxExtraTags)
	}
	tags := make([]string, 0, 1+len(extraTags))
	if tag != "" {
		tags = append(tags, tag)
	}
	for _, t := range extraTags {
		if !ValidTag(t) {
			return nil, fmt.Errorf("%w: %q", ErrTagInvalid, t)
		}
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	alg := digest.Canonical
	if want != "" {
		alg = want.Algorithm()
	}
	d := alg.FromBytes(content)
	if want != "" && d != want {
		return nil, fmt.Errorf("%w: manifest content has digest %s, URL names %s", ErrDigestInvalid, d, want)
	}
	m, err := r.opts.Parser.Parse(d, content)
	if err != nil {
		return nil, err
	}
	// GC may run while we serve: journal what this push relies on before
	// validation checks that it exists (see package fence).
	refs, _ := m.Refs()
	done, err := r.protectForGC(ctx, &fence.Record{Repo: repo, Manifest: true, Digest: d, Tags: tags, Blobs: refs.Blobs, Children: refs.Manifests})
	if err != nil {
		return nil, err
	}
	defer done()
	if err := r.validateManifest(ctx, repo, contentType, m); err != nil {
		if errors.Is(err, ErrManifestBlobUnknown) {
			// The client may have skipped uploads on HEADs the descriptor
			// cache answered for blobs since collected (by a GC that could
			// not reach this cache): its retry must find them all missing,
			// not only the first one validation stopped at.
			for _, b := range refs.Blobs {
				r.ForgetBlob(ctx, repo, b)
			}
		}
		return nil, err
	}
	// An image is durable whole once its manifest is accepted.
	if err := r.sealBlobs(ctx, repo, refs.Blobs); err != nil {
		return nil, err
	}
	// After the links are written (or a write failed half-way).
	defer r.manifestsChanged(ctx, repo)
	if err := r.storeManifest(ctx, repo, m, tags); err != nil {
		return nil, err
	}
	if r.opts.Observer != nil {
		r.opts.Observer.ManifestPushed(ctx, repo, m)
	}
	res := &PutResult{Digest: d, Tags: tags, Manifest: m}
	if m.Subject != nil {
		res.Subject = m.Subject.Digest
	}
	return res, nil
}

// storeRounds bounds how often storeManifest writes its links again after
// a DELETE by digest removed the revision under it; each round needs
// another DELETE to land in its window.
const storeRounds = 4

// storeManifest writes the manifest blob, then its revision link, referrer
// link and tags. A DELETE of the same digest may run at the same time: it
// untags, removes the revision, then untags again. So once the tags are
// written, the revision is checked: if the DELETE removed it, the links
// are written again (the PUT lands after the DELETE); if the DELETE comes
// later, its second untagging removes the tags. Either way no tag is left
// pointing at a missing revision.
func (r *Registry) storeManifest(ctx context.Context, repo string, m *manifest.Manifest, tags []string) error {
	d := m.Digest
	have, err := r.exists(ctx, layout.BlobData(d))
	if err != nil {
		return err
	}
	if !have {
		if err := r.d.PutContent(ctx, layout.BlobData(d), m.Content); err != nil {
			return err
		}
	}
	for range storeRounds {
		if err := r.storeLinks(ctx, repo, d, m, tags); err != nil {
			return err
		}
		ok, err := r.exists(ctx, layout.RevisionLink(repo, d))
		if err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("%w: %s was deleted while it was being pushed, %d times; push it again", ErrManifestUnknown, d, storeRounds)
}

// storeLinks writes manifest d's revision link, referrer link and tags.
func (r *Registry) storeLinks(ctx context.Context, repo string, d digest.Digest, m *manifest.Manifest, tags []string) error {
	if err := r.writeLink(ctx, layout.RevisionLink(repo, d), d); err != nil {
		return err
	}
	if m.Subject != nil {
		if err := r.writeLink(ctx, layout.ReferrerLink(repo, m.Subject.Digest, d), d); err != nil {
			return err
		}
	}
	for _, t := range tags {
		if err := r.writeLink(ctx, layout.TagIndexLink(repo, t, d), d); err != nil {
			return err
		}
		if err := r.writeLink(ctx, layout.TagCurrentLink(repo, t), d); err != nil {
			return err
		}
	}
	return nil
}

// validateManifest checks that m is a manifest cairn serves, of the type
// the client says, naming only blobs and manifests repo has.
func (r *Registry) validateManifest(ctx context.Context, repo, contentType string, m *manifest.Manifest) error {
	ct := ""
	if contentType != "" {
		if parsed, _, err := mime.ParseMediaType(contentType); err == nil {
			ct = parsed
		}
	}
	mt := m.Declared
	switch {
	case mt != "" && ct != "" && !isGenericContentType(ct) && ct != mt:
		return fmt.Errorf("%w: mediaType %q does not match Content-Type %q", ErrManifestInvalid, mt, ct)
	case mt == "" && ct != "" && !isGenericContentType(ct):
		mt = ct
	case mt == "":
		mt = m.MediaType
	}
	switch mt {
	case manifest.MediaTypeDockerSchema1, manifest.MediaTypeDockerSchema1JWS:
		return fmt.Errorf("%w: Docker schema 1 manifests are not supported", ErrManifestInvalid)
	}
	if !manifest.IsMediaType(mt) {
		return fmt.Errorf("%w: unsupported manifest media type %q", ErrManifestInvalid, mt)
	}
	if m.Declared == "" && m.MediaType != mt {
		// A GET names the type from the stored content alone: refuse
		// content it would serve as another type than the one pushed.
		return fmt.Errorf("%w: no mediaType, and the content reads as %q, not %q", ErrManifestInvalid, m.MediaType, mt)
	}
	if m.SchemaVersion == nil || *m.SchemaVersion != 2 {
		return fmt.Errorf("%w: schemaVersion must be 2", ErrManifestInvalid)
	}
	if m.Subject != nil {
		if err := validDescriptor("subject", *m.Subject); err != nil {
			return err
		}
	}
	if manifest.IsIndexMediaType(mt) {
		if m.Config != nil || m.Layers != nil {
			return fmt.Errorf("%w: an index has no config or layers", ErrManifestInvalid)
		}
		for i, c := range m.Manifests {
			if err := validDescriptor(fmt.Sprintf("manifests[%d]", i), c); err != nil {
				return err
			}
			if err := r.requireChild(ctx, repo, fmt.Sprintf("manifests[%d]", i), c); err != nil {
				return err
			}
		}
		return nil
	}
	if m.Manifests != nil {
		return fmt.Errorf("%w: an image manifest has no manifests list", ErrManifestInvalid)
	}
	if m.Config == nil {
		return fmt.Errorf("%w: config descriptor missing", ErrManifestInvalid)
	}
	if err := validDescriptor("config", *m.Config); err != nil {
		return err
	}
	if err := r.checkClass(m.Config.MediaType); err != nil {
		return err
	}
	if err := r.requireLinkedBlob(ctx, repo, "config", *m.Config); err != nil {
		return err
	}
	for i, l := range m.Layers {
		if err := validDescriptor(fmt.Sprintf("layers[%d]", i), l); err != nil {
			return err
		}
		if u := r.opts.LayerURLs; u != nil {
			if err := u.check(fmt.Sprintf("layers[%d]", i), l.URLs); err != nil {
				return err
			}
		}
		if manifest.IsNonDistributable(l.MediaType) {
			continue
		}
		if err := r.requireLinkedBlob(ctx, repo, fmt.Sprintf("layers[%d]", i), l); err != nil {
			return err
		}
	}
	return nil
}

// checkClass applies ManifestClasses to an image manifest's config type.
func (r *Registry) checkClass(configType string) error {
	allowed := r.opts.ManifestClasses
	if len(allowed) == 0 {
		return nil
	}
	var class string
	switch configType {
	case ocispec.MediaTypeImageConfig, manifest.MediaTypeDockerImageConfig:
		class = "image"
	case manifest.MediaTypeDockerPluginConfig:
		class = "plugin"
	default:
		return fmt.Errorf("%w: unknown manifest class for %s", ErrDenied, configType)
	}
	if !slices.Contains(allowed, class) {
		return fmt.Errorf("%w: registry does not allow %s manifest", ErrDenied, class)
	}
	return nil
}

func isGenericContentType(ct string) bool {
	return ct == "application/json" || ct == "application/octet-stream" || ct == "text/plain"
}

func validDescriptor(field string, desc ocispec.Descriptor) error {
	if err := desc.Digest.Validate(); err != nil {
		return fmt.Errorf("%w: %s: digest %q: %v", ErrManifestInvalid, field, desc.Digest, err)
	}
	if !desc.Digest.Algorithm().Available() {
		return fmt.Errorf("%w: %s: unsupported digest algorithm %q", ErrManifestInvalid, field, desc.Digest.Algorithm())
	}
	if desc.Size < 0 {
		return fmt.Errorf("%w: %s: negative size", ErrManifestInvalid, field)
	}
	return nil
}

// requireLinkedBlob is requireBlob for a config or layer, which sparse
// manifests may name without pushing.
func (r *Registry) requireLinkedBlob(ctx context.Context, repo, field string, desc ocispec.Descriptor) error {
	if r.sparse(repo) {
		return nil
	}
	return r.requireBlob(ctx, repo, field, desc)
}

// requireBlob fails with ErrManifestBlobUnknown unless repo links the blob
// desc names and its bytes exist, and with ErrManifestInvalid when they are
// not desc.Size bytes long: the image spec says content whose length does
// not match its descriptor must not be trusted, so clients would refuse to
// pull such a manifest's layer (containerd fails the pull; ggcr fails the
// digest check). distribution does not check; cairn refuses at push time,
// where the pusher can fix it.
func (r *Registry) requireBlob(ctx context.Context, repo, field string, desc ocispec.Descriptor) error {
	ok, err := r.linkedInRepo(ctx, repo, desc.Digest)
	if err != nil {
		return err
	}
	size := int64(-1)
	if ok {
		size, ok, err = r.storedSize(ctx, desc.Digest)
		if err != nil {
			return err
		}
	}
	if !ok {
		return fmt.Errorf("%w: %s", ErrManifestBlobUnknown, desc.Digest)
	}
	if size >= 0 && size != desc.Size {
		return fmt.Errorf("%w: %s: size %d, but blob %s is %d bytes", ErrManifestInvalid, field, desc.Size, desc.Digest, size)
	}
	return nil
}

// requireChild checks an index entry: a manifest must be a revision of repo,
// anything else a blob of repo.
func (r *Registry) requireChild(ctx context.Context, repo, field string, desc ocispec.Descriptor) error {
	if !r.childRequired(repo, desc.Platform) {
		return nil
	}
	if desc.MediaType != "" && !manifest.IsMediaType(desc.MediaType) {
		return r.requireBlob(ctx, repo, field, desc)
	}
	ok, err := r.exists(ctx, layout.RevisionLink(repo, desc.Digest))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: manifest %s", ErrManifestBlobUnknown, desc.Digest)
	}
	fi, err := driver.StatFile(ctx, r.d, layout.BlobData(desc.Digest))
	if err != nil {
		if errors.Is(err, driver.ErrNotFound) {
			return fmt.Errorf("%w: manifest %s (revision without data)", ErrManifestBlobUnknown, desc.Digest)
		}
		return err
	}
	if fi.Size != desc.Size {
		return fmt.Errorf("%w: %s: size %d, but manifest %s is %d bytes", ErrManifestInvalid, field, desc.Size, desc.Digest, fi.Size)
	}
	return nil
}

// sparse reports whether manifests stored in repo may name blobs and
// children it does not hold.
func (r *Registry) sparse(repo string) bool {
	return r.opts.SparseManifests || r.opts.Mirrored != nil && r.opts.Mirrored(repo)
}

// childRequired applies the index validation policy to a child's platform.
func (r *Registry) childRequired(repo string, p *ocispec.Platform) bool {
	if r.sparse(repo) {
		return false
	}
	switch r.opts.IndexPlatforms {
	case "none":
		return false
	case "list":
		if p == nil {
			return true
		}
		for _, want := range r.opts.PlatformList {
			if want.OS == p.OS && want.Architecture == p.Architecture {
				return true
			}
		}
		return false
	}
	return true
}

// DeleteManifest deletes ref from repo. A tag reference deletes only that
// tag; a digest deletes the manifest revision, every tag that points at it
// and its entry among its subject's referrers.
func (r *Registry) DeleteManifest(ctx context.Context, repo, ref string) error {
	if !r.opts.DeleteEnabled {
		return fmt.Errorf("%w: deletes are disabled", ErrUnsupported)
	}
	return r.Evict(ctx, repo, ref)
}

// Evict is DeleteManifest for cairn itself (a pull-through cache's
// expiry), whether or not the API may delete.
func (r *Registry) Evict(ctx context.Context, repo, ref string) error {
	tag, d, err := ParseReference(ref)
	if err != nil {
		return err
	}
	defer r.manifestsChanged(ctx, repo) // after the links are deleted
	if tag != "" {
		err := r.d.Delete(ctx, layout.TagDir(repo, tag))
		if errors.Is(err, driver.ErrNotFound) {
			return r.unknownManifest(ctx, repo, ref)
		}
		return err
	}
	ok, err := r.exists(ctx, layout.RevisionLink(repo, d))
	if err != nil {
		return err
	}
	if !ok {
		return r.unknownManifest(ctx, repo, ref)
	}
	// Tags first: a tag must never point at a missing revision.
	if err := r.untagDigest(ctx, repo, d); err != nil {
		return err
	}
	if content, err := r.d.GetContent(ctx, layout.BlobData(d)); err == nil {
		if m, err := r.opts.Parser.Parse(d, content); err == nil && m.Subject != nil && m.Subject.Digest.Validate() == nil {
			err := r.d.Delete(ctx, path.Dir(layout.ReferrerLink(repo, m.Subject.Digest, d)))
			if err != nil && !errors.Is(err, driver.ErrNotFound) {
				return err
			}
		}
	}
	err = r.d.Delete(ctx, layout.RevisionDir(repo, d))
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return err
	}
	// A PUT by tag racing this DELETE may have tagged d after the first
	// untagging: untag again now that the revision is gone (see
	// storeManifest for the PUT's side).
	return r.untagDigest(ctx, repo, d)
}

// untagDigest deletes every tag of repo whose current link is d.
func (r *Registry) untagDigest(ctx context.Context, repo string, d digest.Digest) error {
	tags, err := r.Tags(ctx, repo)
	if err != nil {
		if errors.Is(err, ErrNameUnknown) {
			return nil
		}
		return err
	}
	// Each tag is one link read; storage.tag.concurrencylimit bounds how
	// many are in flight, which on an object store is what a delete costs.
	conc := r.opts.TagLookups
	if conc <= 0 {
		conc = runtime.GOMAXPROCS(0)
	}
	errs := make([]error, len(tags))
	parallel.For(ctx, len(tags), conc, func(i int) {
		t := tags[i]
		cur, err := r.readLink(ctx, layout.TagCurrentLink(repo, t))
		if err != nil || cur != d {
			return
		}
		if err := r.d.Delete(ctx, layout.TagDir(repo, t)); err != nil && !errors.Is(err, driver.ErrNotFound) {
			errs[i] = err
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// Tags returns repo's tags in lexical order. A repository that exists with
// no tags has an empty list; one that does not exist is ErrNameUnknown.
func (r *Registry) Tags(ctx context.Context, repo string) ([]string, error) {
	entries, err := r.d.List(ctx, layout.TagsDir(repo))
	if errors.Is(err, driver.ErrNotFound) {
		ok, err := r.RepositoryExists(ctx, repo)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrNameUnknown, repo)
		}
		return []string{}, nil
	}
	if err != nil {
		return nil, err
	}
	tags := make([]string, 0, len(entries))
	for _, e := range entries {
		tags = append(tags, path.Base(e))
	}
	slices.Sort(tags)
	return tags, nil
}
