// Package manifest is a manifest as a value: its bytes, digest and the
// fields cairn reads, parsed once from JSON, with the references the
// garbage collector follows and the media types cairn accepts. It does no
// I/O and knows no storage, so every reader of manifests (the registry,
// GC, dedup, scrub, retention) takes it without taking the registry, as
// go-containerregistry keeps its value types in pkg/v1.
package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ErrInvalid: content is not a manifest. The registry returns it as its
// ErrManifestInvalid (the same value), which the API answers
// MANIFEST_INVALID.
var ErrInvalid = errors.New("manifest invalid")

// Manifest is a manifest or index parsed once: its bytes, its digest and
// every field cairn reads, of any flavour a registry holds (OCI and Docker
// image manifests and indexes, OCI artifact manifests, Docker schema 1
// written by distribution). The registry parses a manifest once per
// request and hands this value to whoever needs it: validation, the GC
// journal, the garbage collector's mark, dedup's worker and predictor and
// the request's events.
type Manifest struct {
	Digest  digest.Digest
	Content []byte
	// MediaType is the declared type, else the one the shape tells (older
	// OCI manifests omit the field).
	MediaType string
	// Declared is the mediaType field as stored ("" when absent).
	Declared      string
	SchemaVersion *int
	ArtifactType  string
	Config        *ocispec.Descriptor
	Layers        []ocispec.Descriptor
	Blobs         []ocispec.Descriptor // OCI artifact manifest (draft 1.1)
	Manifests     []ocispec.Descriptor
	Subject       *ocispec.Descriptor
	Annotations   map[string]string
	// FSLayers are a Docker schema 1 manifest's layers.
	FSLayers []digest.Digest
}

// manifestJSON is the union of the fields of every flavour, as stored.
type manifestJSON struct {
	SchemaVersion *int                 `json:"schemaVersion"`
	MediaType     string               `json:"mediaType"`
	ArtifactType  string               `json:"artifactType"`
	Config        *ocispec.Descriptor  `json:"config"`
	Layers        []ocispec.Descriptor `json:"layers"`
	Blobs         []ocispec.Descriptor `json:"blobs"`
	Manifests     []ocispec.Descriptor `json:"manifests"`
	Subject       *ocispec.Descriptor  `json:"subject"`
	Annotations   map[string]string    `json:"annotations"`
	FSLayers      []struct {
		BlobSum digest.Digest `json:"blobSum"`
	} `json:"fsLayers"`
}

// Parse parses content, stored or pushed as manifest d. It fails (with
// ErrInvalid) only when content is not one JSON object; what the fields
// say is checked by the push's validation, not here.
func Parse(d digest.Digest, content []byte) (*Manifest, error) {
	var j manifestJSON
	if err := json.Unmarshal(content, &j); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrInvalid, err)
	}
	m := &Manifest{
		Digest: d, Content: content, Declared: j.MediaType, SchemaVersion: j.SchemaVersion,
		ArtifactType: j.ArtifactType, Config: j.Config, Layers: j.Layers, Blobs: j.Blobs,
		Manifests: j.Manifests, Subject: j.Subject, Annotations: j.Annotations,
	}
	if j.FSLayers != nil {
		m.FSLayers = make([]digest.Digest, len(j.FSLayers))
		for i, l := range j.FSLayers {
			m.FSLayers[i] = l.BlobSum
		}
	}
	switch {
	case j.MediaType != "":
		m.MediaType = j.MediaType
	case j.Manifests != nil:
		m.MediaType = ocispec.MediaTypeImageIndex
	case j.FSLayers != nil:
		m.MediaType = MediaTypeDockerSchema1JWS
	default:
		m.MediaType = ocispec.MediaTypeImageManifest
	}
	return m, nil
}

// Parser is Parse that counts what it parsed, for whoever must show how
// often a path parses (a test that a push parses its body once). The zero
// value is ready; a nil *Parser parses without counting.
type Parser struct {
	parsed atomic.Int64
}

// Parse is the package's Parse, counted.
func (p *Parser) Parse(d digest.Digest, content []byte) (*Manifest, error) {
	if p != nil {
		p.parsed.Add(1)
	}
	return Parse(d, content)
}

// Parsed is how many manifests p parsed (successfully or not).
func (p *Parser) Parsed() int64 {
	if p == nil {
		return 0
	}
	return p.parsed.Load()
}

// IsIndex reports whether m lists manifests (an OCI index or Docker list).
func (m *Manifest) IsIndex() bool { return IsIndexMediaType(m.MediaType) }

// Refs are the digests a manifest names, as the garbage collector follows
// them.
type Refs struct {
	// Blobs: config, layers, Docker schema 1 fsLayers, and index entries
	// whose media type is not a manifest's.
	Blobs []digest.Digest
	// Manifests: index entries that are (or may be) manifests.
	Manifests []digest.Digest
	// Subject is the manifest this one refers to, or "".
	Subject digest.Digest
}

// Refs returns what m references; digests that do not parse are skipped
// and counted in bad.
func (m *Manifest) Refs() (refs Refs, bad int) {
	add := func(list *[]digest.Digest, d digest.Digest) {
		if d.Validate() != nil {
			bad++
			return
		}
		*list = append(*list, d)
	}
	if m.Config != nil {
		add(&refs.Blobs, m.Config.Digest)
	}
	for _, l := range m.Layers {
		add(&refs.Blobs, l.Digest)
	}
	for _, l := range m.Blobs {
		add(&refs.Blobs, l.Digest)
	}
	for _, d := range m.FSLayers {
		add(&refs.Blobs, d)
	}
	for _, c := range m.Manifests {
		if IsChildBlob(c.MediaType) {
			add(&refs.Blobs, c.Digest)
			continue
		}
		add(&refs.Manifests, c.Digest)
	}
	if m.Subject != nil {
		if m.Subject.Digest.Validate() == nil {
			refs.Subject = m.Subject.Digest
		} else {
			bad++
		}
	}
	return refs, bad
}

// IsChildBlob reports whether an index entry of media type mt is a blob
// rather than a manifest: an entry with no type, or one whose type names a
// manifest (even one cairn does not know), is taken for a manifest, so
// that GC keeps what it cannot tell apart.
func IsChildBlob(mt string) bool {
	return mt != "" && !IsMediaType(mt) && !strings.Contains(mt, "manifest")
}

// ParseRefs is Parse(…).Refs() for callers that need only the references
// of stored bytes.
func ParseRefs(content []byte) (refs Refs, bad int, err error) {
	m, err := Parse("", content)
	if err != nil {
		return refs, 0, err
	}
	refs, bad = m.Refs()
	return refs, bad, nil
}

// Descriptor describes m as an entry of an index or the referrers list.
func (m *Manifest) Descriptor() ocispec.Descriptor {
	desc := ocispec.Descriptor{
		MediaType:    m.MediaType,
		Digest:       m.Digest,
		Size:         int64(len(m.Content)),
		ArtifactType: m.ArtifactType,
		Annotations:  m.Annotations,
	}
	if desc.ArtifactType == "" && m.Config != nil {
		desc.ArtifactType = m.Config.MediaType
	}
	return desc
}
