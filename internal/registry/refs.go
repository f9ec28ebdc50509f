package registry

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ManifestRefs are the digests a manifest names, as the garbage collector
// follows them.
type ManifestRefs struct {
	// Blobs: config, layers, Docker schema 1 fsLayers, and index entries
	// whose media type is not a manifest's.
	Blobs []digest.Digest
	// Manifests: index entries that are (or may be) manifests.
	Manifests []digest.Digest
	// Subject is the manifest this one refers to, or "".
	Subject digest.Digest
}

// ParseManifestRefs extracts what a stored manifest references, from any
// manifest flavour a registry may hold (OCI and Docker image manifests and
// indexes, OCI artifact manifests, Docker schema 1 written by distribution).
// Digests that do not parse are skipped and counted in bad.
func ParseManifestRefs(content []byte) (refs ManifestRefs, bad int, err error) {
	var m struct {
		Config    *ocispec.Descriptor  `json:"config"`
		Layers    []ocispec.Descriptor `json:"layers"`
		Blobs     []ocispec.Descriptor `json:"blobs"` // OCI artifact manifest (draft 1.1)
		Manifests []ocispec.Descriptor `json:"manifests"`
		Subject   *ocispec.Descriptor  `json:"subject"`
		FSLayers  []struct {
			BlobSum digest.Digest `json:"blobSum"`
		} `json:"fsLayers"`
	}
	if err := json.Unmarshal(content, &m); err != nil {
		return refs, 0, fmt.Errorf("manifest is not JSON: %w", err)
	}
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
	for _, l := range m.FSLayers {
		add(&refs.Blobs, l.BlobSum)
	}
	for _, c := range m.Manifests {
		if c.MediaType != "" && !IsManifestMediaType(c.MediaType) && !strings.Contains(c.MediaType, "manifest") {
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
	return refs, bad, nil
}
