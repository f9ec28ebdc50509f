package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

const (
	mtOCIManifest    = ocispec.MediaTypeImageManifest
	mtOCIIndex       = ocispec.MediaTypeImageIndex
	mtDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mtDockerConfig   = "application/vnd.docker.container.image.v1+json"
	mtDockerLayer    = "application/vnd.docker.image.rootfs.diff.tar.gzip"
)

// blobSet is a config and layers uploaded to one repository.
type blobSet struct {
	config ocispec.Descriptor
	layers []ocispec.Descriptor
}

// uploadBlobSet uploads a config and n random layers to repo.
func (e *env) uploadBlobSet(repo string, n int) blobSet {
	e.t.Helper()
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},"salt":"` + sha(randBytes(e.t, 8)) + `"}`)
	bs := blobSet{config: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.Digest(e.uploadBlob(repo, cfg)), Size: int64(len(cfg))}}
	for range n {
		b := randBytes(e.t, 2000)
		bs.layers = append(bs.layers, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.Digest(e.uploadBlob(repo, b)), Size: int64(len(b))})
	}
	return bs
}

// ociManifest marshals an OCI image manifest.
func ociManifest(t testing.TB, config ocispec.Descriptor, layers []ocispec.Descriptor, ann map[string]string) []byte {
	t.Helper()
	b, err := json.Marshal(ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   mtOCIManifest,
		Config:      config,
		Layers:      layers,
		Annotations: ann,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dockerManifest marshals a Docker schema2 manifest over the same blobs.
func dockerManifest(t testing.TB, bs blobSet) []byte {
	t.Helper()
	type desc struct {
		MediaType string        `json:"mediaType"`
		Size      int64         `json:"size"`
		Digest    digest.Digest `json:"digest"`
	}
	m := struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Config        desc   `json:"config"`
		Layers        []desc `json:"layers"`
	}{2, mtDockerManifest, desc{mtDockerConfig, bs.config.Size, bs.config.Digest}, nil}
	for _, l := range bs.layers {
		m.Layers = append(m.Layers, desc{mtDockerLayer, l.Size, l.Digest})
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// paddedManifest is an OCI manifest over bs of exactly size bytes.
func paddedManifest(t testing.TB, bs blobSet, size int) []byte {
	t.Helper()
	b := ociManifest(t, bs.config, bs.layers, map[string]string{"pad": ""})
	pad := size - len(b)
	if pad < 0 {
		t.Fatalf("manifest is already %d bytes", len(b))
	}
	b = ociManifest(t, bs.config, bs.layers, map[string]string{"pad": strings.Repeat("x", pad)})
	if len(b) != size {
		t.Fatalf("padded manifest is %d bytes, want %d", len(b), size)
	}
	return b
}

// wantManifestHeaders checks a successful HEAD or GET of a manifest.
func wantManifestHeaders(t *testing.T, r regtest.Response, body []byte, mediaType string) {
	t.Helper()
	wantStatus(t, r, http.StatusOK)
	if got := r.Header.Get("Content-Type"); got != mediaType {
		t.Errorf("%v: Content-Type %q, want %q", r, got, mediaType)
	}
	if got := r.Header.Get("Docker-Content-Digest"); got != sha(body) {
		t.Errorf("%v: Docker-Content-Digest %q, want %q", r, got, sha(body))
	}
	if got := r.Header.Get("Content-Length"); got != strconv.Itoa(len(body)) {
		t.Errorf("%v: Content-Length %q, want %d", r, got, len(body))
	}
}

// ociTags collects the tags named by OCI-Tag response headers.
func ociTags(r regtest.Response) []string {
	var tags []string
	for _, h := range r.Header.Values("OCI-Tag") {
		for _, tag := range strings.Split(h, ",") {
			tags = append(tags, strings.TrimSpace(tag))
		}
	}
	slices.Sort(tags)
	return tags
}

func TestManifests(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/manifests"
	bs := e.uploadBlobSet(repo, 2)
	oci := ociManifest(t, bs.config, bs.layers, nil)
	docker := dockerManifest(t, bs)

	r := e.putManifest(repo, "v1", mtOCIManifest, oci)
	wantStatus(t, r, http.StatusCreated)
	if r.Header.Get("Location") == "" || r.Header.Get("Docker-Content-Digest") != sha(oci) {
		t.Errorf("%v: Location %q, Docker-Content-Digest %q", r, r.Header.Get("Location"), r.Header.Get("Docker-Content-Digest"))
	}
	wantStatus(t, e.putManifest(repo, "docker", mtDockerManifest, docker), http.StatusCreated)
	// Parameters on Content-Type are ignored and not served back.
	wantStatus(t, e.putManifest(repo, "params", mtOCIManifest+"; charset=utf-8", oci), http.StatusCreated)
	e.getManifest(repo, "params", sha(oci), mtOCIManifest)
	wantStatus(t, e.do(http.MethodDelete, "/v2/"+repo+"/manifests/params", nil), http.StatusAccepted)

	for _, ref := range []string{"v1", sha(oci)} {
		wantManifestHeaders(t, e.do(http.MethodHead, "/v2/"+repo+"/manifests/"+ref, nil, "Accept", regtest.ManifestAccept), oci, mtOCIManifest)
		r := e.do(http.MethodHead, "/v2/"+repo+"/manifests/"+ref, nil, "Accept", regtest.ManifestAccept)
		if len(r.Body) != 0 {
			t.Errorf("HEAD returned a body")
		}
		e.getManifest(repo, ref, sha(oci), mtOCIManifest)
	}
	wantManifestHeaders(t, e.do(http.MethodGet, "/v2/"+repo+"/manifests/docker", nil, "Accept", regtest.ManifestAccept), docker, mtDockerManifest)

	// Push by digest with tags in the query.
	withTags := ociManifest(t, bs.config, bs.layers, map[string]string{"x": "tags"})
	r = e.do(http.MethodPut, "/v2/"+repo+"/manifests/"+sha(withTags)+"?tag=a&tag=b&tag=c", withTags, "Content-Type", mtOCIManifest)
	wantStatus(t, r, http.StatusCreated)
	if got := ociTags(r); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("%v: OCI-Tag headers name %v, want [a b c]", r, got)
	}
	for _, tag := range []string{"a", "b", "c"} {
		e.getManifest(repo, tag, sha(withTags), mtOCIManifest)
	}

	// Delete by tag: only the tag goes.
	wantStatus(t, e.do(http.MethodDelete, "/v2/"+repo+"/manifests/b", nil), http.StatusAccepted)
	wantError(t, e.do(http.MethodGet, "/v2/"+repo+"/manifests/b", nil), http.StatusNotFound, "MANIFEST_UNKNOWN")
	e.getManifest(repo, "a", sha(withTags), mtOCIManifest)
	e.getManifest(repo, sha(withTags), sha(withTags), mtOCIManifest)
	tags, _ := e.tagsList(repo, "")
	if want := []string{"a", "c", "docker", "v1"}; !slices.Equal(tags, want) {
		t.Errorf("tags after deleting b = %v, want %v", tags, want)
	}

	// Delete by digest: the manifest and every tag naming it go.
	wantStatus(t, e.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+sha(withTags), nil), http.StatusAccepted)
	for _, ref := range []string{sha(withTags), "a", "c"} {
		wantError(t, e.do(http.MethodGet, "/v2/"+repo+"/manifests/"+ref, nil), http.StatusNotFound, "MANIFEST_UNKNOWN")
		wantStatus(t, e.do(http.MethodHead, "/v2/"+repo+"/manifests/"+ref, nil), http.StatusNotFound)
	}
	tags, _ = e.tagsList(repo, "")
	if want := []string{"docker", "v1"}; !slices.Equal(tags, want) {
		t.Errorf("tags after deleting the manifest = %v, want %v", tags, want)
	}
	wantError(t, e.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+sha(withTags), nil), http.StatusNotFound, "MANIFEST_UNKNOWN")
	wantError(t, e.do(http.MethodDelete, "/v2/"+repo+"/manifests/nosuchtag", nil), http.StatusNotFound, "MANIFEST_UNKNOWN")
	// The blobs the deleted manifest shared with others are still there.
	e.getManifest(repo, "v1", sha(oci), mtOCIManifest)
	for _, l := range bs.layers {
		e.getBlob(repo, l.Digest.String(), l.Size)
	}

	// Re-pushing the same bytes is idempotent; a tag can be re-pointed.
	wantStatus(t, e.putManifest(repo, "v1", mtOCIManifest, oci), http.StatusCreated)
	wantStatus(t, e.putManifest(repo, "v1", mtDockerManifest, docker), http.StatusCreated)
	e.getManifest(repo, "v1", sha(docker), mtDockerManifest)
	e.getManifest(repo, sha(oci), sha(oci), mtOCIManifest)

	// An index over manifests in the repository.
	idx, _ := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: mtOCIIndex,
		Manifests: []ocispec.Descriptor{
			{MediaType: mtOCIManifest, Digest: digest.Digest(sha(oci)), Size: int64(len(oci)), Platform: &ocispec.Platform{OS: "linux", Architecture: "amd64"}},
			{MediaType: mtDockerManifest, Digest: digest.Digest(sha(docker)), Size: int64(len(docker)), Platform: &ocispec.Platform{OS: "linux", Architecture: "arm64"}},
		},
	})
	wantStatus(t, e.putManifest(repo, "multi", mtOCIIndex, idx), http.StatusCreated)
	wantManifestHeaders(t, e.do(http.MethodGet, "/v2/"+repo+"/manifests/multi", nil, "Accept", regtest.ManifestAccept), idx, mtOCIIndex)
}

func TestManifestSizeLimit(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/big"
	bs := e.uploadBlobSet(repo, 1)
	// The spec asks registries to take manifests of at least 4 MB.
	ok := paddedManifest(t, bs, 4_000_000)
	wantStatus(t, e.putManifest(repo, "ok", mtOCIManifest, ok), http.StatusCreated)
	e.getManifest(repo, "ok", sha(ok), mtOCIManifest)

	big := paddedManifest(t, bs, 4<<20+1)
	r := e.putManifest(repo, "ok", mtOCIManifest, big)
	wantErrorIn(t, r, []int{http.StatusRequestEntityTooLarge, http.StatusBadRequest}, "SIZE_INVALID", "MANIFEST_INVALID")
	e.getManifest(repo, "ok", sha(ok), mtOCIManifest)
	wantStatus(t, e.do(http.MethodHead, "/v2/"+repo+"/manifests/"+sha(big), nil), http.StatusNotFound)
}

// TestRejectedPushChangesNothing sends bad manifests to a tag that names a
// good image and checks, after each, that the image still pulls byte-exact.
func TestRejectedPushChangesNothing(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/reject"
	img := e.pushRandom(repo+":stable", 3, 4096)
	bs := e.uploadBlobSet(repo, 2)
	missing := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.Digest(sha(randBytes(t, 16))), Size: 16}
	missingCfg := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: missing.Digest, Size: 16}
	good := ociManifest(t, bs.config, bs.layers, nil)

	missingChild, _ := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: mtOCIIndex,
		Manifests: []ocispec.Descriptor{{MediaType: mtOCIManifest, Digest: missing.Digest, Size: 16}},
	})

	for _, tc := range []struct {
		name      string
		ref       string
		mediaType string
		body      []byte
		statuses  []int
		codes     []string
	}{
		{"missing layer", "stable", mtOCIManifest, ociManifest(t, bs.config, append(slices.Clone(bs.layers), missing), nil),
			[]int{400, 404}, []string{"MANIFEST_BLOB_UNKNOWN"}},
		{"missing config", "stable", mtOCIManifest, ociManifest(t, missingCfg, bs.layers, nil),
			[]int{400, 404}, []string{"MANIFEST_BLOB_UNKNOWN"}},
		{"index with missing child", "stable", mtOCIIndex, missingChild,
			[]int{400, 404}, []string{"MANIFEST_BLOB_UNKNOWN"}},
		{"invalid JSON", "stable", mtOCIManifest, []byte(`{"schemaVersion": 2, "mediaType": `),
			[]int{400}, []string{"MANIFEST_INVALID"}},
		{"not a manifest", "stable", mtOCIManifest, []byte(`[1,2,3]`),
			[]int{400}, []string{"MANIFEST_INVALID"}},
		{"schemaVersion 3", "stable", mtOCIManifest, []byte(strings.Replace(string(good), `"schemaVersion":2`, `"schemaVersion":3`, 1)),
			[]int{400}, []string{"MANIFEST_INVALID"}},
		{"tag too long", strings.Repeat("t", 129), mtOCIManifest, good,
			[]int{400}, []string{"TAG_INVALID", "MANIFEST_INVALID", "NAME_INVALID"}},
		{"tag starts with a dot", ".hidden", mtOCIManifest, good,
			[]int{400}, []string{"TAG_INVALID", "MANIFEST_INVALID", "NAME_INVALID"}},
		{"digest mismatch", sha(good[1:]), mtOCIManifest, good,
			[]int{400}, []string{"DIGEST_INVALID"}},
		{"too large", "stable", mtOCIManifest, paddedManifest(t, bs, 4<<20+100),
			[]int{400, 413}, []string{"SIZE_INVALID", "MANIFEST_INVALID"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.with(t)
			r := e.putManifest(repo, tc.ref, tc.mediaType, tc.body)
			wantErrorIn(t, r, tc.statuses, tc.codes...)
			e.verifyImage(repo, "stable", img)
			wantStatus(t, e.do(http.MethodHead, "/v2/"+repo+"/manifests/"+sha(tc.body), nil), http.StatusNotFound)
			if tags, _ := e.tagsList(repo, ""); !slices.Equal(tags, []string{"stable"}) {
				t.Errorf("tags = %v, want [stable]", tags)
			}
		})
	}
}

func TestSHA512Manifest(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/sha512"
	layer := randBytes(t, 3000)
	ld := e.uploadBlobAlg(repo, layer, "sha512")
	cfg := []byte(`{"architecture":"arm64","os":"linux"}`)
	cd := e.uploadBlob(repo, cfg)
	m := ociManifest(t,
		ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.Digest(cd), Size: int64(len(cfg))},
		[]ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.Digest(ld), Size: int64(len(layer))}},
		nil)
	md := digestOf(t, "sha512", m)
	r := e.putManifest(repo, md, mtOCIManifest, m)
	wantStatus(t, r, http.StatusCreated)
	if got := r.Header.Get("Docker-Content-Digest"); got != md {
		t.Errorf("%v: Docker-Content-Digest %q, want the client's %q", r, got, md)
	}
	e.getManifest(repo, md, md, mtOCIManifest)
	r = e.do(http.MethodHead, "/v2/"+repo+"/manifests/"+md, nil, "Accept", regtest.ManifestAccept)
	wantStatus(t, r, http.StatusOK)
	if r.Header.Get("Docker-Content-Digest") != md || r.Header.Get("Content-Length") != strconv.Itoa(len(m)) {
		t.Errorf("HEAD %s: Docker-Content-Digest %q, Content-Length %q", md, r.Header.Get("Docker-Content-Digest"), r.Header.Get("Content-Length"))
	}
	e.getBlob(repo, ld, int64(len(layer)))
	wantError(t, e.putManifest(repo, digestOf(t, "sha512", m[1:]), mtOCIManifest, m), http.StatusBadRequest, "DIGEST_INVALID")
	wantStatus(t, e.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+md, nil), http.StatusAccepted)
	wantError(t, e.do(http.MethodGet, "/v2/"+repo+"/manifests/"+md, nil), http.StatusNotFound, "MANIFEST_UNKNOWN")
}
