package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"path"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Manifest media types cairn accepts besides the OCI ones in ocispec.
const (
	MediaTypeDockerManifest     = "application/vnd.docker.distribution.manifest.v2+json"
	MediaTypeDockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaTypeDockerSchema1      = "application/vnd.docker.distribution.manifest.v1+json"
	mediaTypeDockerSchema1JWS   = "application/vnd.docker.distribution.manifest.v1+prettyjws"
	mediaTypeDockerForeign      = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
)

// Manifest is a stored manifest.
type Manifest struct {
	Digest    digest.Digest
	MediaType string
	Content   []byte
}

// manifestFields is the union of the fields cairn reads from image manifests
// and indexes of both OCI and Docker flavours.
type manifestFields struct {
	SchemaVersion *int                 `json:"schemaVersion"`
	MediaType     string               `json:"mediaType"`
	ArtifactType  string               `json:"artifactType"`
	Config        *ocispec.Descriptor  `json:"config"`
	Layers        []ocispec.Descriptor `json:"layers"`
	Manifests     []ocispec.Descriptor `json:"manifests"`
	Subject       *ocispec.Descriptor  `json:"subject"`
	Annotations   map[string]string    `json:"annotations"`
	FSLayers      []json.RawMessage    `json:"fsLayers"`
	Signatures    []json.RawMessage    `json:"signatures"`
}

// IsManifestMediaType reports whether mt names a manifest or index type.
func IsManifestMediaType(mt string) bool {
	switch mt {
	case ocispec.MediaTypeImageManifest, ocispec.MediaTypeImageIndex,
		MediaTypeDockerManifest, MediaTypeDockerManifestList:
		return true
	}
	return false
}

func isIndexMediaType(mt string) bool {
	return mt == ocispec.MediaTypeImageIndex || mt == MediaTypeDockerManifestList
}

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
	if tag != "" {
		d, err = r.readLink(ctx, tagCurrentLinkPath(repo, tag))
		if errors.Is(err, driver.ErrNotFound) {
			return "", r.unknownManifest(ctx, repo, ref)
		}
		if err != nil {
			return "", err
		}
	}
	ok, err := r.exists(ctx, revisionLinkPath(repo, d))
	if err != nil {
		return "", err
	}
	if !ok {
		return "", r.unknownManifest(ctx, repo, ref)
	}
	return d, nil
}

// unknownManifest says NAME_UNKNOWN for a missing repository, else
// MANIFEST_UNKNOWN.
func (r *Registry) unknownManifest(ctx context.Context, repo, ref string) error {
	if ok, err := r.RepositoryExists(ctx, repo); err == nil && !ok {
		return fmt.Errorf("%w: %s", ErrNameUnknown, repo)
	}
	return fmt.Errorf("%w: %s", ErrManifestUnknown, ref)
}

// GetManifest returns the manifest ref (a tag or digest) of repo.
func (r *Registry) GetManifest(ctx context.Context, repo, ref string) (*Manifest, error) {
	d, err := r.resolve(ctx, repo, ref)
	if err != nil {
		return nil, err
	}
	content, err := r.d.GetContent(ctx, blobDataPath(d))
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s (revision without data)", ErrManifestUnknown, ref)
	}
	if err != nil {
		return nil, err
	}
	return &Manifest{Digest: d, MediaType: detectMediaType(content), Content: content}, nil
}

// detectMediaType names a stored manifest's type from its content: its
// mediaType field, else its shape (older OCI manifests omit the field).
func detectMediaType(content []byte) string {
	var m struct {
		MediaType string          `json:"mediaType"`
		Manifests json.RawMessage `json:"manifests"`
		Config    json.RawMessage `json:"config"`
		FSLayers  json.RawMessage `json:"fsLayers"`
	}
	if err := json.Unmarshal(content, &m); err != nil {
		return ocispec.MediaTypeImageManifest
	}
	switch {
	case m.MediaType != "":
		return m.MediaType
	case m.Manifests != nil:
		return ocispec.MediaTypeImageIndex
	case m.FSLayers != nil:
		return mediaTypeDockerSchema1JWS
	}
	return ocispec.MediaTypeImageManifest
}

// PutResult tells what a manifest push stored.
type PutResult struct {
	Digest  digest.Digest
	Subject digest.Digest // "" when the manifest has no subject
	Tags    []string      // the tags now pointing at it
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
	// GC may run while we serve: journal what this push relies on before
	// validation checks that it exists (see layout.go).
	if rec, ok := manifestRecord(repo, d, content, tags); ok {
		done, err := r.protectForGC(ctx, rec)
		if err != nil {
			return nil, err
		}
		defer done()
	}
	m, err := r.validateManifest(ctx, repo, contentType, content)
	if err != nil {
		return nil, err
	}
	if err := r.storeManifest(ctx, repo, d, content, m, tags); err != nil {
		return nil, err
	}
	res := &PutResult{Digest: d, Tags: tags}
	if m.Subject != nil {
		res.Subject = m.Subject.Digest
	}
	return res, nil
}

func (r *Registry) storeManifest(ctx context.Context, repo string, d digest.Digest, content []byte, m *manifestFields, tags []string) error {
	have, err := r.exists(ctx, blobDataPath(d))
	if err != nil {
		return err
	}
	if !have {
		if err := r.d.PutContent(ctx, blobDataPath(d), content); err != nil {
			return err
		}
	}
	if err := r.writeLink(ctx, revisionLinkPath(repo, d), d); err != nil {
		return err
	}
	if m.Subject != nil {
		if err := r.writeLink(ctx, referrerLinkPath(repo, m.Subject.Digest, d), d); err != nil {
			return err
		}
	}
	for _, t := range tags {
		if err := r.writeLink(ctx, tagIndexLinkPath(repo, t, d), d); err != nil {
			return err
		}
		if err := r.writeLink(ctx, tagCurrentLinkPath(repo, t), d); err != nil {
			return err
		}
	}
	return nil
}

// validateManifest parses content and checks it is a manifest cairn serves,
// of the type the client says, naming only blobs and manifests repo has.
func (r *Registry) validateManifest(ctx context.Context, repo, contentType string, content []byte) (*manifestFields, error) {
	var m manifestFields
	// Parsed as GC parses it (ParseManifestRefs): a json.Decoder would let a
	// stray '}' or ']' follow the document, and GC, unable to read such a
	// manifest, would not mark the blobs it names.
	if err := json.Unmarshal(content, &m); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrManifestInvalid, err)
	}
	ct := ""
	if contentType != "" {
		if parsed, _, err := mime.ParseMediaType(contentType); err == nil {
			ct = parsed
		}
	}
	mt := m.MediaType
	switch {
	case mt != "" && ct != "" && !isGenericContentType(ct) && ct != mt:
		return nil, fmt.Errorf("%w: mediaType %q does not match Content-Type %q", ErrManifestInvalid, mt, ct)
	case mt == "" && ct != "" && !isGenericContentType(ct):
		mt = ct
	case mt == "":
		mt = detectMediaType(content)
	}
	switch mt {
	case mediaTypeDockerSchema1, mediaTypeDockerSchema1JWS:
		return nil, fmt.Errorf("%w: Docker schema 1 manifests are not supported", ErrManifestInvalid)
	}
	if !IsManifestMediaType(mt) {
		return nil, fmt.Errorf("%w: unsupported manifest media type %q", ErrManifestInvalid, mt)
	}
	if m.MediaType == "" {
		// A GET names the type from the stored content alone: refuse
		// content it would serve as another type than the one pushed.
		if served := detectMediaType(content); served != mt {
			return nil, fmt.Errorf("%w: no mediaType, and the content reads as %q, not %q", ErrManifestInvalid, served, mt)
		}
	}
	if m.SchemaVersion == nil || *m.SchemaVersion != 2 {
		return nil, fmt.Errorf("%w: schemaVersion must be 2", ErrManifestInvalid)
	}
	if m.Subject != nil {
		if err := validDescriptor("subject", *m.Subject); err != nil {
			return nil, err
		}
	}
	if isIndexMediaType(mt) {
		if m.Config != nil || m.Layers != nil {
			return nil, fmt.Errorf("%w: an index has no config or layers", ErrManifestInvalid)
		}
		for i, c := range m.Manifests {
			if err := validDescriptor(fmt.Sprintf("manifests[%d]", i), c); err != nil {
				return nil, err
			}
			if err := r.requireChild(ctx, repo, c); err != nil {
				return nil, err
			}
		}
		return &m, nil
	}
	if m.Manifests != nil {
		return nil, fmt.Errorf("%w: an image manifest has no manifests list", ErrManifestInvalid)
	}
	if m.Config == nil {
		return nil, fmt.Errorf("%w: config descriptor missing", ErrManifestInvalid)
	}
	if err := validDescriptor("config", *m.Config); err != nil {
		return nil, err
	}
	if err := r.requireLinkedBlob(ctx, repo, m.Config.Digest); err != nil {
		return nil, err
	}
	for i, l := range m.Layers {
		if err := validDescriptor(fmt.Sprintf("layers[%d]", i), l); err != nil {
			return nil, err
		}
		if isNonDistributable(l.MediaType) {
			continue
		}
		if err := r.requireLinkedBlob(ctx, repo, l.Digest); err != nil {
			return nil, err
		}
	}
	return &m, nil
}

func isGenericContentType(ct string) bool {
	return ct == "application/json" || ct == "application/octet-stream" || ct == "text/plain"
}

// isNonDistributable reports layers that live outside the registry (Windows
// foreign layers), which a manifest may name without pushing.
func isNonDistributable(mt string) bool {
	return mt == mediaTypeDockerForeign || strings.Contains(mt, ".nondistributable.")
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
func (r *Registry) requireLinkedBlob(ctx context.Context, repo string, d digest.Digest) error {
	if r.opts.SparseManifests {
		return nil
	}
	return r.requireBlob(ctx, repo, d)
}

// requireBlob fails with ErrManifestBlobUnknown unless repo links blob d and
// its data exists.
func (r *Registry) requireBlob(ctx context.Context, repo string, d digest.Digest) error {
	ok, err := r.linkedInRepo(ctx, repo, d)
	if err == nil && ok {
		ok, err = r.blobExists(ctx, d)
	}
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s", ErrManifestBlobUnknown, d)
	}
	return nil
}

// requireChild checks an index entry: a manifest must be a revision of repo,
// anything else a blob of repo.
func (r *Registry) requireChild(ctx context.Context, repo string, desc ocispec.Descriptor) error {
	if !r.childRequired(desc.Platform) {
		return nil
	}
	if desc.MediaType != "" && !IsManifestMediaType(desc.MediaType) {
		return r.requireBlob(ctx, repo, desc.Digest)
	}
	ok, err := r.exists(ctx, revisionLinkPath(repo, desc.Digest))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: manifest %s", ErrManifestBlobUnknown, desc.Digest)
	}
	return nil
}

// childRequired applies the index validation policy to a child's platform.
func (r *Registry) childRequired(p *ocispec.Platform) bool {
	if r.opts.SparseManifests {
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
	tag, d, err := ParseReference(ref)
	if err != nil {
		return err
	}
	if tag != "" {
		err := r.d.Delete(ctx, tagPath(repo, tag))
		if errors.Is(err, driver.ErrNotFound) {
			return r.unknownManifest(ctx, repo, ref)
		}
		return err
	}
	ok, err := r.exists(ctx, revisionLinkPath(repo, d))
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
	if content, err := r.d.GetContent(ctx, blobDataPath(d)); err == nil {
		var m manifestFields
		if json.Unmarshal(content, &m) == nil && m.Subject != nil && m.Subject.Digest.Validate() == nil {
			err := r.d.Delete(ctx, path.Dir(referrerLinkPath(repo, m.Subject.Digest, d)))
			if err != nil && !errors.Is(err, driver.ErrNotFound) {
				return err
			}
		}
	}
	err = r.d.Delete(ctx, revisionDir(repo, d))
	if errors.Is(err, driver.ErrNotFound) {
		return nil
	}
	return err
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
	for _, t := range tags {
		cur, err := r.readLink(ctx, tagCurrentLinkPath(repo, t))
		if err != nil || cur != d {
			continue
		}
		if err := r.d.Delete(ctx, tagPath(repo, t)); err != nil && !errors.Is(err, driver.ErrNotFound) {
			return err
		}
	}
	return nil
}

// Tags returns repo's tags in lexical order. A repository that exists with
// no tags has an empty list; one that does not exist is ErrNameUnknown.
func (r *Registry) Tags(ctx context.Context, repo string) ([]string, error) {
	entries, err := r.d.List(ctx, tagsPath(repo))
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
