package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/gc"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

func TestParseChallenge(t *testing.T) {
	for _, c := range []struct {
		in     string
		scheme string
		params map[string]string
	}{
		{`Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/alpine:pull"`, "Bearer",
			map[string]string{"realm": "https://auth.docker.io/token", "service": "registry.docker.io", "scope": "repository:library/alpine:pull"}},
		{`Basic realm="cairn \"test\" realm"`, "Basic", map[string]string{"realm": `cairn "test" realm`}},
		{`Bearer realm=https://a/t, service=s`, "Bearer", map[string]string{"realm": "https://a/t", "service": "s"}},
		{`Bearer`, "Bearer", map[string]string{}},
	} {
		scheme, params := parseChallenge(c.in)
		if scheme != c.scheme || len(params) != len(c.params) {
			t.Errorf("%s: %s %v", c.in, scheme, params)
			continue
		}
		for k, v := range c.params {
			if params[k] != v {
				t.Errorf("%s: %s = %q, want %q", c.in, k, params[k], v)
			}
		}
	}
}

func TestRoute(t *testing.T) {
	c, err := New(nil, Options{Upstreams: []Upstream{
		{Prefix: "docker.io", URL: "https://registry-1.docker.io"},
		{Prefix: "ghcr.io/", URL: "https://ghcr.io"},
		{Prefix: "ghcr.io/org", URL: "https://org.example"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for repo, want := range map[string]string{
		"docker.io/alpine":         "registry-1.docker.io library/alpine",
		"docker.io/bitnami/redis":  "registry-1.docker.io bitnami/redis",
		"ghcr.io/a/b":              "ghcr.io a/b",
		"ghcr.io/org/tool":         "org.example tool",
		"docker.iox/alpine":        "",
		"local/app":                "",
		"docker.io":                "",
		"ghcr.io/organisation/app": "ghcr.io organisation/app",
	} {
		m, name, ok := c.route(repo)
		got := ""
		if ok {
			got = m.up.base.Host + " " + name
		}
		if got != want {
			t.Errorf("route(%s) = %q, want %q", repo, got, want)
		}
	}
	if _, err := New(nil, Options{Upstreams: []Upstream{{Prefix: "a", URL: "https://x"}, {Prefix: "a/", URL: "https://y"}}}); err == nil {
		t.Error("two upstreams for one prefix accepted")
	}
}

// fakeUpstream serves one manifest and blobs, Basic auth required; bad
// serves blobs with one byte changed.
type fakeUpstream struct {
	manifest []byte
	blobs    map[digest.Digest][]byte
	bad      atomic.Bool
	fetches  atomic.Int32
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u, p, ok := r.BasicAuth(); !ok || u != "u" || p != "p" {
		w.Header().Set("WWW-Authenticate", `Basic realm="fake"`)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	i := strings.LastIndex(r.URL.Path, "/")
	ref := r.URL.Path[i+1:]
	switch {
	case strings.Contains(r.URL.Path, "/manifests/"):
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", digest.FromBytes(f.manifest).String())
		w.Write(f.manifest)
	case strings.Contains(r.URL.Path, "/blobs/"):
		b, ok := f.blobs[digest.Digest(ref)]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Method == http.MethodHead {
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			return
		}
		f.fetches.Add(1)
		if f.bad.Load() {
			b = append([]byte{b[0] ^ 1}, b[1:]...)
		}
		w.Write(b) // chunked: the cache asks a HEAD for the size
	}
}

func newTestCache(t *testing.T) (*Cache, *registry.Registry, *fakeUpstream) {
	t.Helper()
	layer := bytes.Repeat([]byte("layer "), 50_000)
	cfg := []byte(`{"architecture":"amd64","os":"linux"}`)
	ld, cd := digest.FromBytes(layer), digest.FromBytes(cfg)
	manifest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` +
		cd.String() + `","size":` + strconv.Itoa(len(cfg)) + `},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"` + ld.String() + `","size":` + strconv.Itoa(len(layer)) + `}]}`)
	f := &fakeUpstream{manifest: manifest, blobs: map[digest.Digest][]byte{ld: layer, cd: cfg}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	var c *Cache
	reg := registry.New(inmemory.New(), registry.Options{Mirrored: func(repo string) bool { return c.Mirrors(repo) }})
	c, err := New(reg, Options{Upstreams: []Upstream{{Prefix: "up", URL: srv.URL, Username: "u", Password: "p"}}, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return c, reg, f
}

// TestBlobFetch: a blob is fetched once, served from any offset while
// and after it arrives, and stored; bytes that do not match their digest
// fail the read and are never stored.
func TestBlobFetch(t *testing.T) {
	ctx := t.Context()
	c, reg, f := newTestCache(t)
	if _, err := c.Manifest(ctx, "up/app", "v1", false); err != nil {
		t.Fatal(err)
	}
	var ld digest.Digest
	for d, b := range f.blobs {
		if len(b) > 1000 {
			ld = d
		}
	}
	layer := f.blobs[ld]

	f.bad.Store(true)
	info, err := c.StatBlob(ctx, "up/app", ld, true)
	if err != nil || info.Size != int64(len(layer)) || !info.Fetching {
		t.Fatalf("StatBlob of a blob being fetched: %+v, %v", info, err)
	}
	rc, err := c.OpenBlob(ctx, "up/app", ld, info, 0)
	if err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	if !errors.Is(err, ErrUpstream) {
		t.Fatalf("read of a corrupt upstream blob: %v, want ErrUpstream", err)
	}
	if _, err := reg.StatBlob(ctx, "up/app", ld); !errors.Is(err, registry.ErrBlobUnknown) {
		t.Fatalf("a corrupt blob was stored: %v", err)
	}

	f.bad.Store(false)
	info, err = c.StatBlob(ctx, "up/app", ld, true)
	if err != nil {
		t.Fatal(err)
	}
	rc, err = c.OpenBlob(ctx, "up/app", ld, info, 1000)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, layer[1000:]) {
		t.Fatalf("read from offset 1000: %d bytes, %v", len(got), err)
	}
	// Stored and linked: later reads come from storage, not the upstream.
	waitStored(t, reg, "up/app", ld)
	before := f.fetches.Load()
	info, err = c.StatBlob(ctx, "up/app", ld, true)
	if err != nil || info.Fetching {
		t.Fatalf("StatBlob after the fetch: %+v, %v", info, err)
	}
	rc, err = c.OpenBlob(ctx, "up/app", ld, info, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, layer) || f.fetches.Load() != before {
		t.Fatalf("read after storing: %d bytes, %d more fetches", len(got), f.fetches.Load()-before)
	}
	// Another mirrored repository links it without a fetch.
	if info, err := c.StatBlob(ctx, "up/other", ld, true); err != nil || info.Fetching || f.fetches.Load() != before {
		t.Fatalf("StatBlob in another repository: %+v, %v, %d more fetches", info, err, f.fetches.Load()-before)
	}
}

func waitStored(t *testing.T, reg *registry.Registry, repo string, d digest.Digest) {
	t.Helper()
	for {
		if _, err := reg.StatBlob(t.Context(), repo, d); err == nil {
			return
		}
		if t.Context().Err() != nil {
			t.Fatal("blob never stored")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestExpire: a tag nobody pulled within the TTL is untagged and its
// manifest deleted, one pulled since stays; after a GC the expired image's
// own blobs are gone while a layer a pushed image shares stays.
func TestExpire(t *testing.T) {
	ctx := t.Context()
	c, reg, f := newTestCache(t)
	const ttl = time.Hour
	c.mirrors[0].TTL = ttl
	var ld, cd digest.Digest
	for d, b := range f.blobs {
		if len(b) > 1000 {
			ld = d
		} else {
			cd = d
		}
	}
	pull := func(repo string) digest.Digest {
		t.Helper()
		m, err := c.Manifest(ctx, repo, "v1", false)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []digest.Digest{cd, ld} {
			info, err := c.StatBlob(ctx, repo, d, true)
			if err != nil {
				t.Fatal(err)
			}
			rc, err := c.OpenBlob(ctx, repo, d, info, 0)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, rc)
			rc.Close()
			waitStored(t, reg, repo, d)
		}
		return m.Digest
	}
	md := pull("up/old")
	pull("up/kept")
	// A pushed image sharing the layer.
	ownCfg := []byte(`{"architecture":"arm64","os":"linux"}`)
	for _, b := range [][]byte{ownCfg, f.blobs[ld]} {
		id, err := reg.StartUpload(ctx, "local/app")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.FinishUpload(ctx, "local/app", id, digest.FromBytes(b), bytes.NewReader(b), 0); err != nil {
			t.Fatal(err)
		}
	}
	own := bytes.Replace(f.manifest, []byte(cd.String()), []byte(digest.FromBytes(ownCfg).String()), 1)
	own = bytes.Replace(own, []byte(`"size":`+strconv.Itoa(len(f.blobs[cd]))), []byte(`"size":`+strconv.Itoa(len(ownCfg))), 1)
	if _, err := reg.PutManifest(ctx, "local/app", "v1", "application/vnd.oci.image.manifest.v1+json", own, nil); err != nil {
		t.Fatal(err)
	}

	tags, _, err := reg.ManifestLinks(ctx, "up/old")
	if err != nil || len(tags) != 1 {
		t.Fatalf("tags of up/old: %v, %v", tags, err)
	}
	old := tags[0].Written
	time.Sleep(20 * time.Millisecond)
	// Pulled again after a revalidation: its link is rewritten.
	c.forget("up/kept", "v1")
	pull("up/kept")

	if rep, err := c.Expire(ctx, old.Add(ttl/2)); err != nil || rep.Tags+rep.Manifests != 0 {
		t.Fatalf("expiry within the TTL: %+v, %v", rep, err)
	}
	rep, err := c.Expire(ctx, old.Add(ttl+time.Millisecond))
	if err != nil || rep.Tags != 1 || rep.Manifests != 1 || rep.Repositories != 2 {
		t.Fatalf("expiry: %+v, %v; want up/old's tag and manifest", rep, err)
	}
	if _, err := reg.GetManifest(ctx, "up/old", md.String()); !errors.Is(err, registry.ErrManifestUnknown) {
		t.Fatalf("expired manifest still there: %v", err)
	}
	if _, err := reg.GetManifest(ctx, "up/kept", "v1"); err != nil {
		t.Fatalf("the manifest pulled since: %v", err)
	}
	// up/kept still names the config and layer: expire it too, then GC.
	c.forget("up/kept", "v1")
	if rep, err := c.Expire(ctx, time.Now().Add(ttl+time.Minute)); err != nil || rep.Tags != 1 {
		t.Fatalf("second expiry: %+v, %v", rep, err)
	}
	if _, err := gc.Run(ctx, reg.Driver(), gc.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.GetManifest(ctx, "local/app", "v1"); err != nil {
		t.Fatal(err)
	}
	if info, err := reg.StatBlob(ctx, "local/app", ld); err != nil {
		t.Fatalf("the shared layer after expiry and GC: %+v, %v", info, err)
	}
	if ok, err := reg.MountBlob(ctx, "local/other", cd, ""); err != nil || ok {
		t.Fatalf("the expired image's own config survived GC (mounted %v, %v)", ok, err)
	}
}
