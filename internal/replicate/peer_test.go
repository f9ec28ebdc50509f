package replicate

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/proxy"
)

func newPeer(t *testing.T, h http.Handler) peer {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := proxy.NewClient(proxy.Remote{URL: srv.URL}, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return peer{c}
}

// TestListingsFollowLinks: the catalog and tag lists are read page by page
// through their Link headers; an unknown repository has no tags.
func TestListingsFollowLinks(t *testing.T) {
	p := newPeer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path + "?" + r.URL.Query().Get("last") {
		case "/v2/_catalog?":
			w.Header().Set("Link", `</v2/_catalog?last=b&n=1000>; rel="next"`)
			json.NewEncoder(w).Encode(map[string][]string{"repositories": {"a", "b"}})
		case "/v2/_catalog?b":
			json.NewEncoder(w).Encode(map[string][]string{"repositories": {"c"}})
		case "/v2/a/tags/list?":
			w.Header().Set("Link", `<http://`+r.Host+`/v2/a/tags/list?last=v1&n=1000>; rel="next"`)
			json.NewEncoder(w).Encode(map[string][]string{"tags": {"v1"}})
		case "/v2/a/tags/list?v1":
			json.NewEncoder(w).Encode(map[string][]string{"tags": {"v2"}})
		default:
			http.NotFound(w, r)
		}
	}))
	ctx := context.Background()
	repos, err := p.catalog(ctx)
	if err != nil || !slices.Equal(repos, []string{"a", "b", "c"}) {
		t.Fatalf("catalog %v, %v", repos, err)
	}
	tags, err := p.tags(ctx, "a")
	if err != nil || !slices.Equal(tags, []string{"v1", "v2"}) {
		t.Fatalf("tags %v, %v", tags, err)
	}
	if tags, err := p.tags(ctx, "nope"); err != nil || len(tags) != 0 {
		t.Fatalf("tags of an unknown repository: %v, %v", tags, err)
	}
}

// TestFallbackReferrers: on a registry without the referrers API a
// referrer is added to its subject's tag-schema index (once), and the
// referrers are read back from that index.
func TestFallbackReferrers(t *testing.T) {
	var mu sync.Mutex
	manifests := map[string][]byte{}
	p := newPeer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		const prefix = "/v2/r/manifests/"
		if len(r.URL.Path) <= len(prefix) || r.URL.Path[:len(prefix)] != prefix {
			http.NotFound(w, r) // no referrers API
			return
		}
		ref := r.URL.Path[len(prefix):]
		switch r.Method {
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			manifests[ref] = b
			manifests[digest.FromBytes(b).String()] = b
			w.WriteHeader(http.StatusCreated)
		default:
			b, ok := manifests[ref]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", ocispec.MediaTypeImageIndex)
			w.Header().Set("Docker-Content-Digest", digest.FromBytes(b).String())
			if r.Method == http.MethodGet {
				w.Write(b)
			}
		}
	}))
	ctx := context.Background()
	subject := digest.FromString("subject")
	if got, err := p.referrers(ctx, "r", subject); err != nil || len(got) != 0 {
		t.Fatalf("referrers before any: %v, %v", got, err)
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("sbom"), Size: 10, ArtifactType: "application/vnd.example.sbom"}
	for range 2 {
		if err := p.addFallbackReferrer(ctx, "r", subject, desc, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	got, err := p.referrers(ctx, "r", subject)
	if err != nil || len(got) != 1 || got[0].Digest != desc.Digest || got[0].ArtifactType != desc.ArtifactType {
		t.Fatalf("referrers %+v, %v; want the one added (once)", got, err)
	}
	if _, ok := manifests[referrerTag(subject)]; !ok {
		t.Fatalf("no index under %s", referrerTag(subject))
	}
}
