package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// randomImage returns an image of n random layers of size bytes each, with
// OCI media types when oci is true, else Docker schema2 ones.
func randomImage(t testing.TB, oci bool, n int, size int64) v1.Image {
	t.Helper()
	if oci {
		return regtest.RandomImage(t, n, size)
	}
	img, err := random.Image(size, int64(n))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// platformIndex builds a multi-platform index of random images, OCI or
// Docker manifest list.
func platformIndex(t testing.TB, oci bool, platforms ...v1.Platform) v1.ImageIndex {
	t.Helper()
	var idx v1.ImageIndex = empty.Index
	if !oci {
		idx = mutate.IndexMediaType(idx, types.DockerManifestList)
	}
	for _, p := range platforms {
		img := randomImage(t, oci, 2, 2048)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}
	return idx
}

// ref parses "<repo>:<tag>" or "<repo>@<digest>" on this server.
func (e *env) ref(s string) name.Reference {
	e.t.Helper()
	r, err := name.ParseReference(s, name.Insecure, name.WithDefaultRegistry(e.srv.Addr))
	if err != nil {
		e.t.Fatalf("parse reference %q: %v", s, err)
	}
	return r
}

// refFor joins repo and a tag or digest into a reference.
func (e *env) refFor(repo, reference string) name.Reference {
	e.t.Helper()
	if strings.Contains(reference, ":") {
		return e.ref(repo + "@" + reference)
	}
	return e.ref(repo + ":" + reference)
}

func (e *env) repo(s string) name.Repository {
	e.t.Helper()
	r, err := name.NewRepository(s, name.Insecure, name.WithDefaultRegistry(e.srv.Addr))
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) ropts(extra ...remote.Option) []remote.Option {
	return append([]remote.Option{remote.WithContext(e.t.Context()), remote.WithTransport(e.tr)}, extra...)
}

func (e *env) push(img v1.Image, ref string) {
	e.t.Helper()
	if err := remote.Write(e.ref(ref), img, e.ropts()...); err != nil {
		e.t.Fatalf("push %s: %v", ref, err)
	}
}

// pushRandom pushes an OCI image of n random layers of size bytes as ref
// and returns it.
func (e *env) pushRandom(ref string, n int, size int64) v1.Image {
	e.t.Helper()
	img := randomImage(e.t, true, n, size)
	e.push(img, ref)
	return img
}

func (e *env) pushIndex(idx v1.ImageIndex, ref string) {
	e.t.Helper()
	if err := remote.WriteIndex(e.ref(ref), idx, e.ropts()...); err != nil {
		e.t.Fatalf("push index %s: %v", ref, err)
	}
}

func mustDigest(t testing.TB, x interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	h, err := x.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// manifestDescriptor is the descriptor of img's OCI manifest, as a
// referrer names its subject.
func manifestDescriptor(t testing.TB, img v1.Image) ocispec.Descriptor {
	t.Helper()
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	return ocispec.Descriptor{MediaType: mtOCIManifest, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
}

// wantManifest GETs repo:reference (tag or digest) and checks that the
// server answers with want's manifest, byte for byte, its digest and media
// type; it returns the digest.
func (e *env) wantManifest(repo, reference string, want interface {
	Digest() (v1.Hash, error)
	RawManifest() ([]byte, error)
	MediaType() (types.MediaType, error)
}) string {
	e.t.Helper()
	wantDigest := mustDigest(e.t, want)
	wantRaw, err := want.RawManifest()
	if err != nil {
		e.t.Fatal(err)
	}
	wantMT, _ := want.MediaType()
	if raw := e.getManifest(repo, reference, wantDigest, string(wantMT)); string(raw) != string(wantRaw) {
		e.t.Errorf("%s:%s: manifest bytes differ from those pushed", repo, reference)
	}
	return wantDigest
}

// verifyImage pulls repo:reference (tag or digest) and checks it is want,
// byte for byte: the raw manifest, the config and every layer stream are
// hashed and compared with the digests that name them.
func (e *env) verifyImage(repo, reference string, want v1.Image) {
	e.t.Helper()
	t := e.t
	wantDigest := e.wantManifest(repo, reference, want)
	img, err := remote.Image(e.refFor(repo, reference), e.ropts()...)
	if err != nil {
		t.Fatalf("pull %s %s: %v", repo, reference, err)
	}
	if got := mustDigest(t, img); got != wantDigest {
		t.Errorf("%s:%s: digest %s, want %s", repo, reference, got, wantDigest)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	wantCfg, _ := want.ConfigName()
	if m.Config.Digest != wantCfg {
		t.Errorf("%s:%s: config %s, want %s", repo, reference, m.Config.Digest, wantCfg)
	}
	e.getBlob(repo, m.Config.Digest.String(), m.Config.Size)

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	wantLayers, _ := want.Layers()
	if len(layers) != len(wantLayers) {
		t.Fatalf("%s:%s: %d layers, want %d", repo, reference, len(layers), len(wantLayers))
	}
	for i, l := range layers {
		d, _ := l.Digest()
		wd, _ := wantLayers[i].Digest()
		size, _ := l.Size()
		if d != wd || size != m.Layers[i].Size {
			t.Errorf("layer %d: %s (%d bytes), want %s (%d bytes)", i, d, size, wd, m.Layers[i].Size)
		}
		rc, err := l.Compressed()
		if err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		verifyStream(t, "layer "+d.String(), rc, wd.String(), m.Layers[i].Size)
		rc.Close()
	}
}

// verifyIndex pulls an index by reference and checks its bytes, then every
// child by digest and by platform.
func (e *env) verifyIndex(repo, reference string, want v1.ImageIndex) {
	e.t.Helper()
	t := e.t
	wantDigest := e.wantManifest(repo, reference, want)
	idx, err := remote.Index(e.refFor(repo, reference), e.ropts()...)
	if err != nil {
		t.Fatalf("pull index %s %s: %v", repo, reference, err)
	}
	if got := mustDigest(t, idx); got != wantDigest {
		t.Errorf("index digest %s, want %s", got, wantDigest)
	}
	im, err := want.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range im.Manifests {
		child, err := want.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		e.verifyImage(repo, desc.Digest.String(), child)
		byPlatform, err := remote.Image(e.refFor(repo, reference), e.ropts(remote.WithPlatform(*desc.Platform))...)
		if err != nil {
			t.Fatalf("pull %s:%s for %v: %v", repo, reference, desc.Platform, err)
		}
		if got := mustDigest(t, byPlatform); got != desc.Digest.String() {
			t.Errorf("platform %v resolved to %s, want %s", desc.Platform, got, desc.Digest)
		}
	}
}

func TestAPIVersion(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := e.do(http.MethodGet, "/v2/", nil)
	wantStatus(t, r, http.StatusOK)
	if got := r.Header.Get("Docker-Distribution-API-Version"); got != "registry/2.0" {
		t.Errorf("/v2/: Docker-Distribution-API-Version %q, want registry/2.0", got)
	}
}

func TestImagesPushPull(t *testing.T) {
	t.Parallel()
	e := start(t)
	for _, tc := range []struct {
		name string
		oci  bool
	}{{"oci", true}, {"docker", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.with(t)
			img := randomImage(t, tc.oci, 4, 64<<10)
			repo := "e2e/single/" + tc.name
			e.push(img, repo+":v1")
			e.verifyImage(repo, "v1", img)
			e.verifyImage(repo, mustDigest(t, img), img)
		})
	}
	platforms := []v1.Platform{
		{OS: "linux", Architecture: "amd64"},
		{OS: "linux", Architecture: "arm64", Variant: "v8"},
		{OS: "linux", Architecture: "arm", Variant: "v7"},
	}
	for _, tc := range []struct {
		name string
		oci  bool
		mt   types.MediaType
	}{{"oci-index", true, types.OCIImageIndex}, {"docker-list", false, types.DockerManifestList}} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.with(t)
			idx := platformIndex(t, tc.oci, platforms...)
			if mt, _ := idx.MediaType(); mt != tc.mt {
				t.Fatalf("test built a %s, want %s", mt, tc.mt)
			}
			repo := "e2e/multi/" + tc.name
			e.pushIndex(idx, repo+":latest")
			e.verifyIndex(repo, "latest", idx)
			e.verifyIndex(repo, mustDigest(t, idx), idx)
		})
	}
	t.Run("concurrent", func(t *testing.T) {
		e := e.with(t)
		// Several clients push different images sharing one repository.
		var wg sync.WaitGroup
		imgs := make([]v1.Image, 4)
		for i := range imgs {
			imgs[i] = randomImage(t, i%2 == 0, 3, 32<<10)
		}
		for i, img := range imgs {
			wg.Go(func() {
				if err := remote.Write(e.ref("e2e/concurrent:t"+string(rune('0'+i))), img, e.ropts()...); err != nil {
					t.Errorf("push %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		for i, img := range imgs {
			e.verifyImage("e2e/concurrent", "t"+string(rune('0'+i)), img)
		}
	})
}

func TestTagsAndCatalog(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/tags"
	img1 := randomImage(t, true, 2, 1024)
	img2 := randomImage(t, false, 2, 1024)
	tags := []string{"latest", "1.0", "rc_1", "beta", "2.0", "alpha", "1.1"}
	e.push(img1, repo+":"+tags[0])
	desc, err := remote.Get(e.ref(repo+":latest"), e.ropts()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range tags[1:] {
		if err := remote.Tag(e.ref(repo+":"+tag).(name.Tag), desc, e.ropts()...); err != nil {
			t.Fatalf("tag %s: %v", tag, err)
		}
	}
	sorted := slices.Sorted(slices.Values(tags))

	// Re-tag: latest moves to img2, img1 keeps its other tags and digest.
	e.push(img2, repo+":latest")
	e.verifyImage(repo, "latest", img2)
	e.verifyImage(repo, "alpha", img1)
	e.verifyImage(repo, mustDigest(t, img1), img1)

	got, err := remote.List(e.repo(repo), e.ropts(remote.WithPageSize(2))...)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, sorted) {
		t.Errorf("remote.List = %v, want %v", got, sorted)
	}

	all, r := e.tagsList(repo, "")
	wantStatus(t, r, http.StatusOK)
	if !slices.Equal(all, sorted) {
		t.Errorf("tags/list = %v, want %v", all, sorted)
	}

	// Follow Link headers page by page.
	var paged []string
	next := "/v2/" + repo + "/tags/list?n=2"
	for pages := 0; next != ""; pages++ {
		if pages > len(tags) {
			t.Fatalf("pagination does not end: %v", paged)
		}
		r := e.do(http.MethodGet, next, nil)
		wantStatus(t, r, http.StatusOK)
		var body struct{ Tags []string }
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		next = nextLink(t, r)
		if len(body.Tags) > 2 || (next != "" && len(body.Tags) != 2) {
			t.Errorf("%v: page of %d tags with n=2 (Link %q)", r, len(body.Tags), next)
		}
		paged = append(paged, body.Tags...)
	}
	if !slices.Equal(paged, sorted) {
		t.Errorf("paged tags = %v, want %v", paged, sorted)
	}

	first, r := e.tagsList(repo, "?n=2")
	if !slices.Equal(first, sorted[:2]) || nextLink(t, r) == "" {
		t.Errorf("n=2: %v (Link %q), want %v and a Link", first, r.Header.Get("Link"), sorted[:2])
	}
	page, r := e.tagsList(repo, "?n=2&last="+sorted[1])
	if !slices.Equal(page, sorted[2:4]) {
		t.Errorf("n=2&last=%s: %v, want %v", sorted[1], page, sorted[2:4])
	}
	t.Run("tags n=0", func(t *testing.T) {
		zero, r := e.with(t).tagsList(repo, "?n=0")
		wantStatus(t, r, http.StatusOK)
		if len(zero) != 0 || r.Header.Get("Link") != "" {
			t.Errorf("n=0: %v (Link %q), want an empty list and no Link", zero, r.Header.Get("Link"))
		}
	})
	rest, _ := e.tagsList(repo, "?last=alpha")
	if want := sorted[slices.Index(sorted, "alpha")+1:]; !slices.Equal(rest, want) {
		t.Errorf("last=alpha: %v, want %v", rest, want)
	}
	big, r := e.tagsList(repo, "?n=100")
	if !slices.Equal(big, sorted) || r.Header.Get("Link") != "" {
		t.Errorf("n=100: %v (Link %q), want all and no Link", big, r.Header.Get("Link"))
	}

	// Catalog.
	repos := []string{repo, "cat/a", "cat/b", "cat/c", "zz"}
	for _, rp := range repos[1:] {
		e.pushRandom(rp+":x", 1, 256)
	}
	reg, err := name.NewRegistry(e.srv.Addr, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := remote.Catalog(t.Context(), reg, e.ropts(remote.WithPageSize(2))...)
	if err != nil {
		t.Fatal(err)
	}
	wantRepos := slices.Sorted(slices.Values(repos))
	if !slices.Equal(cat, wantRepos) {
		t.Errorf("catalog = %v, want %v", cat, wantRepos)
	}
	t.Run("catalog n=0", func(t *testing.T) {
		r := e.with(t).do(http.MethodGet, "/v2/_catalog?n=0", nil)
		wantStatus(t, r, http.StatusOK)
		var cb struct{ Repositories []string }
		if err := json.Unmarshal(r.Body, &cb); err != nil || len(cb.Repositories) != 0 || r.Header.Get("Link") != "" {
			t.Errorf("%v: want an empty list and no Link", r)
		}
	})
	r = e.do(http.MethodGet, "/v2/_catalog?n=2&last=cat/a", nil)
	wantStatus(t, r, http.StatusOK)
	var cb struct{ Repositories []string }
	if err := json.Unmarshal(r.Body, &cb); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cb.Repositories, []string{"cat/b", "cat/c"}) || nextLink(t, r) == "" {
		t.Errorf("catalog n=2&last=cat/a: %v (Link %q), want [cat/b cat/c] and a Link", cb.Repositories, r.Header.Get("Link"))
	}
}
