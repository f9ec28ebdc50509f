package manifest

import (
	"encoding/json"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestParseRefs(t *testing.T) {
	cfg, l1, child, sub := digest.FromString("c"), digest.FromString("l"), digest.FromString("m"), digest.FromString("s")
	m := map[string]any{
		"schemaVersion": 2,
		"config":        ocispec.Descriptor{Digest: cfg},
		"layers":        []ocispec.Descriptor{{Digest: l1}, {Digest: "sha256:bad"}},
		"manifests":     []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageManifest, Digest: child}, {MediaType: "application/octet-stream", Digest: l1}},
		"subject":       ocispec.Descriptor{Digest: sub},
		"fsLayers":      []map[string]string{{"blobSum": string(l1)}},
	}
	b, _ := json.Marshal(m)
	refs, bad, err := ParseRefs(b)
	if err != nil || bad != 1 {
		t.Fatalf("bad %d, err %v", bad, err)
	}
	if len(refs.Blobs) != 4 || refs.Blobs[0] != cfg || len(refs.Manifests) != 1 || refs.Manifests[0] != child || refs.Subject != sub {
		t.Errorf("refs %+v", refs)
	}
	if _, _, err := ParseRefs([]byte("nope")); err == nil {
		t.Error("garbage parsed")
	}
}
