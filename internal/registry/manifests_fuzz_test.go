package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"mime"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// Content every fuzzed manifest push finds in the repository, so that seeds
// naming it pass the strict (non-sparse) checks.
var (
	fuzzConfig = []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	fuzzLayer  = []byte("layer bytes")
	fuzzEmpty  = []byte("{}")
)

const fuzzRepo = "fuzz/repo"

func desc(mt string, b []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(b), Size: int64(len(b))}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// fuzzChild is an image manifest stored in the repository before each push,
// so that indexes can name it and artifacts can have it as subject.
var fuzzChild = mustJSON(map[string]any{
	"schemaVersion": 2,
	"mediaType":     ocispec.MediaTypeImageManifest,
	"config":        desc(ocispec.MediaTypeImageConfig, fuzzConfig),
	"layers":        []ocispec.Descriptor{desc(ocispec.MediaTypeImageLayerGzip, fuzzLayer)},
})

// withField returns JSON object b with key k set to v.
func withField(b []byte, k string, v any) []byte {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	m[k] = v
	return mustJSON(m)
}

// newFuzzRegistry returns a registry over a fresh in-memory driver holding
// fuzzConfig, fuzzLayer and fuzzEmpty as blobs of fuzzRepo and fuzzChild as
// its manifest. Blobs are written straight into the layout so the fixture
// does not depend on the upload API.
func newFuzzRegistry(t *testing.T, opts Options) *Registry {
	t.Helper()
	ctx := context.Background()
	r := New(inmemory.New(), opts)
	for _, b := range [][]byte{fuzzConfig, fuzzLayer, fuzzEmpty} {
		d := digest.FromBytes(b)
		if err := r.d.PutContent(ctx, layout.BlobData(d), b); err != nil {
			t.Fatal(err)
		}
		if err := r.writeLink(ctx, layout.LayerLink(fuzzRepo, d), d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.PutManifest(ctx, fuzzRepo, "child", ocispec.MediaTypeImageManifest, fuzzChild, nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// manifestSeeds are real manifest shapes: OCI and Docker image manifests and
// indexes, an artifact with a subject, a foreign layer, and near misses.
func manifestSeeds() []struct {
	ct      string
	content []byte
} {
	child := desc(ocispec.MediaTypeImageManifest, fuzzChild)
	platformChild := child
	platformChild.Platform = &ocispec.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}
	ociManifest := mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     ocispec.MediaTypeImageManifest,
		"config":        desc(ocispec.MediaTypeImageConfig, fuzzConfig),
		"layers": []ocispec.Descriptor{
			desc(ocispec.MediaTypeImageLayerGzip, fuzzLayer),
			desc(ocispec.MediaTypeImageLayer, fuzzLayer),
		},
		"annotations": map[string]string{"org.opencontainers.image.created": "2025-01-01T00:00:00Z"},
	})
	dockerManifest := mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     manifest.MediaTypeDockerManifest,
		"config":        desc("application/vnd.docker.container.image.v1+json", fuzzConfig),
		"layers": []ocispec.Descriptor{
			desc("application/vnd.docker.image.rootfs.diff.tar.gzip", fuzzLayer),
			{MediaType: manifest.MediaTypeDockerForeign, Digest: digest.FromString("foreign"), Size: 7,
				URLs: []string{"https://example.com/layer"}},
		},
	})
	ociIndex := mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     ocispec.MediaTypeImageIndex,
		"manifests":     []ocispec.Descriptor{platformChild, desc("application/vnd.in-toto+json", fuzzLayer)},
	})
	dockerList := mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     manifest.MediaTypeDockerManifestList,
		"manifests":     []ocispec.Descriptor{platformChild},
	})
	artifact := mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     ocispec.MediaTypeImageManifest,
		"artifactType":  "application/vnd.example.sbom",
		"config":        desc(ocispec.MediaTypeEmptyJSON, fuzzEmpty),
		"layers":        []ocispec.Descriptor{desc("application/spdx+json", fuzzLayer)},
		"subject":       child,
	})
	noMediaType := mustJSON(map[string]any{
		"schemaVersion": 2,
		"config":        desc(ocispec.MediaTypeImageConfig, fuzzConfig),
		"layers":        []ocispec.Descriptor{},
	})
	unknownLayer := mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     ocispec.MediaTypeImageManifest,
		"config":        desc(ocispec.MediaTypeImageConfig, fuzzConfig),
		"layers":        []ocispec.Descriptor{desc(ocispec.MediaTypeImageLayerGzip, []byte("never pushed"))},
	})
	indent := func(b []byte) []byte { // as Docker and buildx write them
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "   "); err != nil {
			panic(err)
		}
		return out.Bytes()
	}
	schema1 := []byte(`{"schemaVersion":1,"name":"a","tag":"t","fsLayers":[{"blobSum":"` + string(digest.FromBytes(fuzzLayer)) + `"}]}`)
	return []struct {
		ct      string
		content []byte
	}{
		{ocispec.MediaTypeImageManifest, ociManifest},
		{"", ociManifest},
		{"application/json", ociManifest},
		{manifest.MediaTypeDockerManifest, dockerManifest},
		{manifest.MediaTypeDockerManifest, indent(dockerManifest)},
		{ocispec.MediaTypeImageIndex, indent(ociIndex)},
		{ocispec.MediaTypeImageIndex, ociIndex},
		{manifest.MediaTypeDockerManifestList, dockerList},
		{ocispec.MediaTypeImageManifest, artifact},
		{ocispec.MediaTypeImageManifest, noMediaType},
		{ocispec.MediaTypeImageIndex, noMediaType},
		{manifest.MediaTypeDockerManifest, noMediaType},
		{ocispec.MediaTypeImageIndex, []byte(`{"schemaVersion":2}`)},
		{ocispec.MediaTypeImageManifest, withField(noMediaType, "manifests", nil)},
		{ocispec.MediaTypeImageManifest, withField(noMediaType, "fsLayers", []any{})},
		{"", noMediaType},
		{ocispec.MediaTypeImageManifest, unknownLayer},
		{manifest.MediaTypeDockerManifestList, ociIndex},
		{manifest.MediaTypeDockerSchema1JWS, schema1},
		{ocispec.MediaTypeImageManifest + "; charset=utf-8", ociManifest},
		{ocispec.MediaTypeImageManifest, append(slices.Clone(ociManifest), " \n"...)},
		{ocispec.MediaTypeImageManifest, append(slices.Clone(ociManifest), "{}"...)},
		{ocispec.MediaTypeImageManifest, append(slices.Clone(ociManifest), "}"...)},
		{ocispec.MediaTypeImageManifest, []byte(`{"schemaVersion":2,"config":null}`)},
		{ocispec.MediaTypeImageIndex, []byte(`{"schemaVersion":2,"manifests":[{"digest":"sha256:abc"}]}`)},
		{"", []byte("not json")},
	}
}

// FuzzManifest pushes arbitrary content as a manifest, to a registry that
// checks every reference and to one that accepts sparse manifests, and
// checks that:
//   - a refusal is a client error (MANIFEST_INVALID and friends), never
//     something the server would answer with 500;
//   - what the strict registry accepts, the sparse one accepts too;
//   - an accepted manifest is served back byte for byte under its digest,
//     tag and a manifest media type;
//   - the garbage collector's reading of it (manifest.ParseRefs) succeeds,
//     finds every digest validation required to exist and the same subject:
//     content GC cannot read would have its blobs deleted under it.
//
// manifest.ParseRefs also runs on every input alone: it reads whatever
// storage holds and must never panic, and every digest it returns must be
// valid (GC builds paths from them).
func FuzzManifest(f *testing.F) {
	for _, s := range manifestSeeds() {
		f.Add(s.ct, s.content, false)
		f.Add(s.ct, s.content, true)
	}
	f.Fuzz(func(t *testing.T, ct string, content []byte, byDigest bool) {
		refs, bad, refsErr := manifest.ParseRefs(content)
		if refsErr == nil {
			for _, d := range slices.Concat(refs.Blobs, refs.Manifests) {
				if d.Validate() != nil {
					t.Fatalf("ParseRefs returned invalid digest %q", d)
				}
			}
			if refs.Subject != "" && refs.Subject.Validate() != nil {
				t.Fatalf("ParseRefs returned invalid subject %q", refs.Subject)
			}
		}

		ctx := context.Background()
		d := digest.FromBytes(content)
		ref := "latest"
		if byDigest {
			ref = string(d)
		}
		var accepted [2]bool
		for i, opts := range []Options{{}, {SparseManifests: true}} {
			r := newFuzzRegistry(t, opts)
			res, err := r.PutManifest(ctx, fuzzRepo, ref, ct, content, nil)
			if err != nil {
				if !errors.Is(err, ErrManifestInvalid) && !errors.Is(err, ErrManifestBlobUnknown) && !errors.Is(err, ErrManifestTooLarge) {
					t.Fatalf("PutManifest refused with an unexpected error (a 500): %v", err)
				}
				continue
			}
			accepted[i] = true
			if res.Digest != d {
				t.Fatalf("PutManifest stored digest %s, content has %s", res.Digest, d)
			}
			for _, get := range []string{ref, string(d)} {
				m, err := r.GetManifest(ctx, fuzzRepo, get)
				if err != nil {
					t.Fatalf("GetManifest(%s) after an accepted push: %v", get, err)
				}
				if m.Digest != d || !bytes.Equal(m.Content, content) {
					t.Fatalf("GetManifest(%s) = %s, %d bytes; pushed %s, %d bytes", get, m.Digest, len(m.Content), d, len(content))
				}
				if want := pushedType(content, ct); !manifest.IsMediaType(m.MediaType) || want != "" && m.MediaType != want {
					t.Fatalf("manifest pushed as %q (Content-Type %q) is served as %q", want, ct, m.MediaType)
				}
			}
			if refsErr != nil || bad != 0 {
				t.Fatalf("accepted manifest that GC cannot read: %d bad digests, err %v", bad, refsErr)
			}
			if refs.Subject != res.Subject {
				t.Fatalf("GC reads subject %q, the push recorded %q", refs.Subject, res.Subject)
			}
			marked := slices.Concat(refs.Blobs, refs.Manifests)
			for _, req := range requiredRefs(t, content) {
				if !slices.Contains(marked, req) {
					t.Fatalf("validation relies on %s, which GC would not mark (refs %+v)", req, refs)
				}
			}
		}
		if accepted[0] && !accepted[1] {
			t.Fatal("the strict registry accepted a manifest the sparse one refused")
		}
	})
}

// pushedType is the type a push states: the content's mediaType, else a
// specific Content-Type; "" when it states none (the content decides).
func pushedType(content []byte, ct string) string {
	if m, err := manifest.Parse("", content); err == nil && m.Declared != "" {
		return m.Declared
	}
	if parsed, _, err := mime.ParseMediaType(ct); err == nil && !isGenericContentType(parsed) {
		return parsed
	}
	return ""
}

// requiredRefs lists the digests validation can require to exist in the
// repository: config, distributable layers and index children.
func requiredRefs(t *testing.T, content []byte) []digest.Digest {
	m, err := manifest.Parse("", content)
	if err != nil {
		t.Fatalf("accepted manifest does not parse: %v", err)
	}
	var out []digest.Digest
	if m.Config != nil {
		out = append(out, m.Config.Digest)
	}
	for _, l := range m.Layers {
		if !manifest.IsNonDistributable(l.MediaType) {
			out = append(out, l.Digest)
		}
	}
	for _, c := range m.Manifests {
		out = append(out, c.Digest)
	}
	return out
}
