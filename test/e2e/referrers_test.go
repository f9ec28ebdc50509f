package e2e

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

const (
	artSBOM = "application/vnd.example.sbom.v1"
	artSig  = "application/vnd.example.signature.v1"
	artCfg  = "application/vnd.example.config.v1+json"
)

// artifact is a manifest pushed as a referrer and the descriptor the
// referrers API must list for it.
type artifact struct {
	body []byte
	desc ocispec.Descriptor
}

// pushArtifact pushes, by digest, an OCI image manifest with the given
// artifactType (may be "") and config media type, one layer, annotations
// and subject, and checks the OCI-Subject response header.
func (e *env) pushArtifact(repo, artifactType, configType string, subject ocispec.Descriptor, ann map[string]string) artifact {
	e.t.Helper()
	var cfg ocispec.Descriptor
	if configType == ocispec.MediaTypeEmptyJSON {
		cfg = ocispec.DescriptorEmptyJSON
		cfg.Data = nil
		e.uploadBlob(repo, []byte("{}"))
	} else {
		b := []byte(`{"kind":"example"}`)
		cfg = ocispec.Descriptor{MediaType: configType, Digest: digest.Digest(e.uploadBlob(repo, b)), Size: int64(len(b))}
	}
	layer := randBytes(e.t, 300)
	m, err := json.Marshal(ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    mtOCIManifest,
		ArtifactType: artifactType,
		Config:       cfg,
		Layers:       []ocispec.Descriptor{{MediaType: "application/octet-stream", Digest: digest.Digest(e.uploadBlob(repo, layer)), Size: int64(len(layer))}},
		Subject:      &subject,
		Annotations:  ann,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	r := e.putManifest(repo, sha(m), mtOCIManifest, m)
	wantStatus(e.t, r, http.StatusCreated)
	if got := r.Header.Get("OCI-Subject"); got != subject.Digest.String() {
		e.t.Errorf("%v: OCI-Subject %q, want %q", r, got, subject.Digest)
	}
	at := artifactType
	if at == "" {
		at = configType
	}
	return artifact{body: m, desc: ocispec.Descriptor{
		MediaType: mtOCIManifest, Digest: digest.Digest(sha(m)), Size: int64(len(m)), ArtifactType: at, Annotations: ann,
	}}
}

// referrers GETs the referrers of subject (with an optional query) and
// checks the answer is an OCI index.
func (e *env) referrers(repo, subject, query string) ([]ocispec.Descriptor, regtest.Response) {
	e.t.Helper()
	r := e.do(http.MethodGet, "/v2/"+repo+"/referrers/"+subject+query, nil, "Accept", mtOCIIndex)
	wantStatus(e.t, r, http.StatusOK)
	if got := r.Header.Get("Content-Type"); got != mtOCIIndex {
		e.t.Errorf("%v: Content-Type %q, want %q", r, got, mtOCIIndex)
	}
	var idx struct {
		SchemaVersion int                   `json:"schemaVersion"`
		MediaType     string                `json:"mediaType"`
		Manifests     *[]ocispec.Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(r.Body, &idx); err != nil {
		e.t.Fatalf("%v: %v", r, err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != mtOCIIndex || idx.Manifests == nil {
		e.t.Errorf("%v: not an OCI image index with a manifests array", r)
		return nil, r
	}
	if next := nextLink(e.t, r); next != "" {
		e.t.Errorf("%v: a few referrers should fit one page, got Link %q", r, next)
	}
	return *idx.Manifests, r
}

// sameDescriptors compares descriptor lists in any order on the fields the
// spec requires the referrers API to fill.
func sameDescriptors(t *testing.T, what string, got []ocispec.Descriptor, want ...artifact) {
	t.Helper()
	key := func(d ocispec.Descriptor) string { return d.Digest.String() }
	if len(got) != len(want) {
		t.Errorf("%s: %d referrers, want %d: %+v", what, len(got), len(want), got)
		return
	}
	byDigest := map[string]ocispec.Descriptor{}
	for _, d := range got {
		byDigest[key(d)] = d
	}
	for _, a := range want {
		d, ok := byDigest[key(a.desc)]
		if !ok {
			t.Errorf("%s: %s missing from %+v", what, a.desc.Digest, got)
			continue
		}
		if d.MediaType != a.desc.MediaType || d.Size != a.desc.Size || d.ArtifactType != a.desc.ArtifactType ||
			!maps.Equal(d.Annotations, a.desc.Annotations) {
			t.Errorf("%s: descriptor %+v, want %+v", what, d, a.desc)
		}
	}
}

func TestReferrers(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/referrers"
	img := e.pushRandom(repo+":app", 1, 1024)
	subject := manifestDescriptor(t, img)

	sbom := e.pushArtifact(repo, artSBOM, ocispec.MediaTypeEmptyJSON, subject,
		map[string]string{"org.opencontainers.image.created": "2024-01-01T00:00:00Z", "org.example.sbom.format": "json"})
	sig := e.pushArtifact(repo, artSig, ocispec.MediaTypeEmptyJSON, subject,
		map[string]string{"org.example.signature.fingerprint": "abcd"})
	// No artifactType: the config media type stands in for it.
	byCfg := e.pushArtifact(repo, "", artCfg, subject, nil)

	got, _ := e.referrers(repo, subject.Digest.String(), "")
	sameDescriptors(t, "referrers", got, sbom, sig, byCfg)

	got, r := e.referrers(repo, subject.Digest.String(), "?artifactType="+url.QueryEscape(artSBOM))
	if r.Header.Get("OCI-Filters-Applied") != "artifactType" {
		t.Errorf("%v: OCI-Filters-Applied %q, want artifactType", r, r.Header.Get("OCI-Filters-Applied"))
	}
	sameDescriptors(t, "artifactType="+artSBOM, got, sbom)
	got, _ = e.referrers(repo, subject.Digest.String(), "?artifactType="+url.QueryEscape(artCfg))
	sameDescriptors(t, "artifactType="+artCfg, got, byCfg)
	got, _ = e.referrers(repo, subject.Digest.String(), "?artifactType=application/vnd.none")
	sameDescriptors(t, "artifactType=none", got)

	// The artifact itself pulls byte-exact by digest.
	e.getManifest(repo, sbom.desc.Digest.String(), sbom.desc.Digest.String(), mtOCIManifest)

	// Unknown subject: 200 with an empty index, never 404.
	got, _ = e.referrers(repo, sha(randBytes(t, 8)), "")
	sameDescriptors(t, "unknown subject", got)

	// A referrer may be pushed before its subject exists.
	later := randomImage(t, true, 1, 512)
	lsub := manifestDescriptor(t, later)
	early := e.pushArtifact(repo, artSig, ocispec.MediaTypeEmptyJSON, lsub, map[string]string{"k": "v"})
	got, _ = e.referrers(repo, lsub.Digest.String(), "")
	sameDescriptors(t, "referrer before subject", got, early)
	e.push(later, repo+":later")
	got, _ = e.referrers(repo, lsub.Digest.String(), "")
	sameDescriptors(t, "referrer after subject", got, early)

	// An index can be a referrer too; with no artifactType it has none.
	idx, _ := json.Marshal(ocispec.Index{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   mtOCIIndex,
		Manifests:   []ocispec.Descriptor{subject},
		Subject:     &subject,
		Annotations: map[string]string{"kind": "index"},
	})
	r = e.putManifest(repo, sha(idx), mtOCIIndex, idx)
	wantStatus(t, r, http.StatusCreated)
	if got := r.Header.Get("OCI-Subject"); got != subject.Digest.String() {
		t.Errorf("%v: OCI-Subject %q on an index with a subject", r, got)
	}
	idxArt := artifact{body: idx, desc: ocispec.Descriptor{MediaType: mtOCIIndex, Digest: digest.Digest(sha(idx)), Size: int64(len(idx)), Annotations: map[string]string{"kind": "index"}}}
	got, _ = e.referrers(repo, subject.Digest.String(), "")
	sameDescriptors(t, "with index referrer", got, sbom, sig, byCfg, idxArt)

	// Deleting a referrer removes it from the list.
	wantStatus(t, e.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+sig.desc.Digest.String(), nil), http.StatusAccepted)
	got, _ = e.referrers(repo, subject.Digest.String(), "")
	sameDescriptors(t, "after delete", got, sbom, byCfg, idxArt)

	// A tagged referrer is listed; deleting only its tag keeps it listed,
	// since the manifest still exists.
	tagged := e.pushArtifact(repo, artSBOM, artCfg, subject, map[string]string{"tagged": "yes"})
	r = e.putManifest(repo, "sbom-tag", mtOCIManifest, tagged.body)
	wantStatus(t, r, http.StatusCreated)
	if got := r.Header.Get("OCI-Subject"); got != subject.Digest.String() {
		t.Errorf("%v: OCI-Subject %q on a push by tag", r, got)
	}
	wantStatus(t, e.do(http.MethodDelete, "/v2/"+repo+"/manifests/sbom-tag", nil), http.StatusAccepted)
	got, _ = e.referrers(repo, subject.Digest.String(), "?artifactType="+url.QueryEscape(artSBOM))
	sameDescriptors(t, "after deleting a referrer's tag", got, sbom, tagged)
	wantStatus(t, e.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+tagged.desc.Digest.String(), nil), http.StatusAccepted)

	// Referrers are per repository.
	e.push(img, "e2e/other:app")
	got, _ = e.referrers("e2e/other", subject.Digest.String(), "")
	sameDescriptors(t, "other repository", got)

	// An invalid digest is a 400.
	r = e.do(http.MethodGet, "/v2/"+repo+"/referrers/sha256:nothex", nil)
	wantError(t, r, http.StatusBadRequest, "DIGEST_INVALID")

	// The subject image is untouched.
	e.verifyImage(repo, "app", img)
}

func TestReferrersGGCR(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/ggcr-referrers"
	img := e.pushRandom(repo+":app", 2, 1024)
	subject := manifestDescriptor(t, img)
	sbom := e.pushArtifact(repo, artSBOM, ocispec.MediaTypeEmptyJSON, subject, map[string]string{"a": "1"})
	sig := e.pushArtifact(repo, artSig, ocispec.MediaTypeEmptyJSON, subject, map[string]string{"b": "2"})

	d := e.ref(repo + "@" + subject.Digest.String()).(name.Digest)
	for _, tc := range []struct {
		filter string
		want   []artifact
	}{{"", []artifact{sbom, sig}}, {artSig, []artifact{sig}}} {
		opts := e.ropts()
		if tc.filter != "" {
			opts = append(opts, remote.WithFilter("artifactType", tc.filter))
		}
		idx, err := remote.Referrers(d, opts...)
		if err != nil {
			t.Fatalf("remote.Referrers(%q): %v", tc.filter, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var got []ocispec.Descriptor
		for _, m := range im.Manifests {
			got = append(got, ocispec.Descriptor{MediaType: string(m.MediaType), Digest: digest.Digest(m.Digest.String()),
				Size: m.Size, ArtifactType: m.ArtifactType, Annotations: m.Annotations})
		}
		sameDescriptors(t, "remote.Referrers "+tc.filter, got, tc.want...)
		for _, m := range im.Manifests {
			// Each referrer pulls by the digest the index names.
			desc, err := remote.Get(d.Context().Digest(m.Digest.String()), e.ropts()...)
			if err != nil {
				t.Fatal(err)
			}
			if h, _, _ := v1.SHA256(bytes.NewReader(desc.Manifest)); h != m.Digest {
				t.Errorf("referrer %s hashes to %s", m.Digest, h)
			}
		}
	}
}
